"""Parking a run WAITING and waking it, and the marks of its hand-off to the queue: the moves
that `services.waits` (a durable sleep, a wait for a signal, `signalRun`) and `services.relay`
(timers, the queue's hand-off) ask of a run. Their statements are in `wake_queries`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from outlive.db.tx import Sessions, Unit
from outlive.ids import RunId
from outlive.services.runs import wake_queries as queries
from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.records import RunRecord, to_record


async def park_run(
    uow: Unit,
    run_id: RunId,
    *,
    attempt: int,
    waiting_for: str | None,
    until: datetime | None,
    wait_id: str | None = None,
    show: str | None = None,
) -> RunRecord | None:
    """RUNNING → WAITING for `attempt` (a signal's name, or None: a durable sleep; `until`: its
    timer; `wait_id`: a wait that named itself, `show` what it shows, JSON), with a `waiting`
    event; None when `attempt` no longer executes the run (or a cancel was asked for). Its slot
    under its tenant's cap is free: a waiting run may have it."""
    row = await uow.one(
        queries.PARK.statement,
        run_id=run_id,
        attempt=attempt,
        waiting_for=waiting_for,
        until=until,
        wait_id=wait_id,
        show=show,
    )
    if row is None:
        return None
    run = to_record(row)
    uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
    uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    if uow.limits.runs_capped(row["tenant_max_running"]):
        dispatch_after_commit(uow, run.tenant_id)  # its slot under the cap is free now
    return run


async def wake_by_signal(
    uow: Unit, run: RunRecord, name: str, *, seq: int, payload: str, sender: str | None = None
) -> RunRecord | None:
    """The run WAITING for signal `name` takes signal `seq` of its mailbox (its wait resolved
    with `payload`, JSON) and is woken: `signal`, then `resumed {by: signal}`. None when it no
    longer waits for that name. Not admitted (its tenant is capped), its tenant dispatches after
    the commit."""
    moved = await uow.one(
        queries.WAKE_BY_SIGNAL,
        run_id=run.id,
        name=name,
        seq=seq,
        payload=payload,
        sender=sender,
        default_cap=uow.limits.max_running_runs,
        agents=uow.limits.agents,
    )
    if moved is None:
        return None
    uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
    woken = to_record(moved)
    if woken.dispatched_at is None:
        dispatch_after_commit(uow, woken.tenant_id)
    return woken


async def note_signal(
    uow: Unit, run_id: RunId, name: str, *, payload: str, sender: str | None = None
) -> RunRecord:
    """A signal kept in the mailbox: its `signal` event (the caller holds the run's row lock)."""
    row = await uow.one(
        queries.SIGNAL_EVENT, run_id=run_id, name=name, payload=payload, sender=sender
    )
    assert row is not None  # noqa: S101 (the row is locked by the caller)
    return to_record(row)


async def wake_due(
    sessions: Sessions, *, batch: int, default_cap: int, lead_s: float = 0.0
) -> list[Mapping[str, Any]]:
    """Wake up to `batch` WAITING runs whose timer is due, in one unit: `resumed {by: timer |
    timeout}`; a durable sleep's timer is due `lead_s` early (its attempt finishes the sleep
    in-process). Each woken run's `id`, `tenant_id`, `admitted` and `late_s` (how late its timer
    fired; negative: handed back ahead), for the relay to hand them to the queue after the
    commit; the tenants of those not admitted dispatch after it."""
    async with sessions.unit() as uow:
        woken = await uow.all(
            queries.WAKE_DUE,
            batch=batch,
            default_cap=default_cap,
            agents=uow.limits.agents,
            lead=lead_s,
        )
        for row in woken:
            uow.nudge("run.updated", row["id"], tenant_id=row["tenant_id"])
            uow.nudge("run.event", row["id"], tenant_id=row["tenant_id"])
        for tenant_id in {row["tenant_id"] for row in woken if not row["admitted"]}:
            dispatch_after_commit(uow, tenant_id)  # its admission enqueues what it admits
    return woken


async def handoff_failed_runs(
    sessions: Sessions, run_ids: Sequence[RunId]
) -> list[Mapping[Any, Any]]:
    """The queue could not take these runs: they stay QUEUED, due for the relay now (which its
    trigger tells the relays at once), and `waitingReason` says so. Every column of each run that
    is still QUEUED is returned."""
    if not run_ids:
        return []
    return await sessions.all(queries.HANDOFF_FAILED, ids=list(run_ids))


async def handed(sessions: Sessions, run_ids: Sequence[Any]) -> None:
    """The relay handed these runs, whose hand-off had failed: the mark is cleared."""
    await sessions.all(queries.HANDED, ids=list(run_ids))
