"""Durable sleeps, waits for a signal, and the signals mailbox (contract §4.1, §7).

A sleep past the in-process threshold, or a wait for a signal that is not in the mailbox yet,
parks the run: RUNNING → WAITING in one conditional update fenced on the attempt, with a
`waiting {for, until}` event, and the attempt ends (its worker slot is free; `RunParked`). The
run keeps its (tenant, agent) slot but no place under its tenant's cap. It is woken by:

- its timer (`runs.wake_at`), by the relay in any worker (`services.relay`): `resumed {by:
  "timer"}` after a sleep, `resumed {by: "timeout"}` after a wait for a signal;
- a signal of the name it waits for (`signal_run`): `signal {name}`, then `resumed {by:
  "signal"}`;
- or settled by `cancelRun`, at once.

Each sleep and wait has a durable record in `run_waits`, keyed like a step by (kind, name,
occurrence): the occurrence counts that kind's calls (a sleep; a wait for that name) in program
order within an attempt. Woken, the run is claimed again (a new attempt, not a retry: `resumes`)
and the agent runs from the top: a sleep or wait whose record is resolved returns at once (the
wait with its signal's payload, or its timeout). Code outside durable steps runs again.

A durable sleep's run is handed back ahead of its due time, by the relay's lead
(`services.relay.lead`: `OUTLIVE_WAKE_LEAD_S`, shorter under bursts; the attempt it is handed to
reports how long the hand-back took, `Resolved.handed_s`, for the lead's bound), so that a
worker has claimed it and replayed to the sleep by then: its record is resolved, but `until` is
still ahead, and the attempt finishes the sleep in-process (`Resolved.not_before`, from
PostgreSQL's clock: never before `until`; a cancel ends it at once). Its worker slot is free for
the rest of the sleep. A signal's timeout is never handed back early.

A wait may name itself (`wait_id`): it then never takes a signal from the mailbox, only one bound
to it, and its id and what it shows (`show`) are on the run while it waits (`Run.waitId`,
`Run.waitingShow`). The mailbox and `signalRun` are in `signals`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outlive.db.tx import Db, Unit
from outlive.errors import RunCancelled, RunSuperseded
from outlive.ids import RunId
from outlive.services import runs
from outlive.services.runs import RunRecord, as_json
from outlive.services.waits import queries
from outlive.services.waits.payloads import (
    MAX_IDEMPOTENCY_KEY,
    MAX_NAME,
    MAX_PAYLOAD_BYTES,
    check_name,
    encode_payload,
)
from outlive.services.waits.signals import (
    Mailbox,
    SignalCheck,
    SignalResult,
    check_wait_id,
    is_current_wait,
    signal_run,
    wait_id_of,
)

log = logging.getLogger(__name__)

SLEEP = "sleep"
SIGNAL = "signal"


async def reached_beyond(db: Db, run_id: RunId, reached: Mapping[tuple[str, str], int]) -> bool:
    """Whether an earlier attempt of the run reached a sleep or wait past those this attempt
    reached so far (`reached`: by kind and name, how many), in one statement."""
    rows = await db.all(queries.REACHED, run_id=run_id)
    return any(row["occurrence"] > reached.get((row["kind"], row["name"]), 0) for row in rows)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A sleep or wait that is over: `by` "timer", "signal" or "timeout"; a signal's payload.
    `not_before`: a sleep handed back ahead of its due time ends at this `time.monotonic()`
    (0: now). `handed_s`: a sleep the relay handed back to this attempt (the one after the
    attempt that parked on it): how long ago, by PostgreSQL's clock (the relay's lead bounds
    the slots early wakes hold with it, `services.relay.lead`); None otherwise."""

    by: str
    payload: Any = None
    not_before: float = 0.0
    handed_s: float | None = None


@dataclass(frozen=True, slots=True)
class Parked:
    """The run is WAITING now; the attempt must end."""

    run: RunRecord


async def wait(
    uow: Unit,
    *,
    run_id: RunId,
    attempt: int,
    kind: str,
    name: str,
    occurrence: int,
    seconds: float | None = None,
    until: datetime | None = None,
    wait_id: str | None = None,
    show: Any = None,
) -> Resolved | Parked:
    """Get past the `occurrence`-th sleep (`kind` SLEEP, `name` "") or wait for signal `name`
    (`kind` SIGNAL) of this attempt: already resolved (a resumed attempt), satisfied now (a
    signal in the mailbox), or parked. `seconds` / `until`: its timer (neither: a wait with no
    timeout). `wait_id`: a wait that named itself, answered only by a signal bound to it (never
    one from the mailbox); `show`: what it shows while it waits (JSON). Raises `RunSuperseded`
    when `attempt` no longer executes the run, `RunCancelled` when a cancel was asked for."""
    lock = await uow.one(queries.LOCK_ATTEMPT, run_id=run_id, attempt=attempt)
    if lock is None:
        raise RunSuperseded(f"attempt {attempt} of run {run_id} no longer holds it")
    if lock["cancel_requested_at"] is not None:
        raise RunCancelled()
    key = {"run_id": run_id, "kind": kind, "name": name, "occurrence": occurrence}
    record = await uow.one(queries.GET_WAIT, **key)
    if record is not None and record["resolved_at"] is not None:
        return Resolved(
            record["resolved_by"],
            record["payload"],
            _not_before(kind, record),
            _handed(kind, record, attempt),
        )
    key["wait_id"] = wait_id
    if kind == SIGNAL and wait_id is None:
        taken = await uow.one(queries.TAKE_SIGNAL, run_id=run_id, name=name)
        if taken is not None:
            await _record(uow, key, attempt, seconds, until, by=SIGNAL, payload=taken["payload"])
            return Resolved(SIGNAL, taken["payload"])
    if record is None:
        record = await _record(uow, key, attempt, seconds, until)
    if kind == SLEEP and record["left_s"] is not None and record["left_s"] <= 0:
        await _record(uow, key, attempt, seconds, until, by="timer")
        return Resolved("timer")
    run = await runs.park_run(
        uow,
        run_id,
        attempt=attempt,
        waiting_for=name if kind == SIGNAL else None,
        until=record["until"],
        wait_id=wait_id,
        show=None if wait_id is None else as_json(show),
    )
    if run is None:  # the lock above makes this unreachable; fenced all the same
        raise RunSuperseded(f"attempt {attempt} of run {run_id} no longer holds it")
    return Parked(run)


def _not_before(kind: str, record: Any) -> float:
    """When a resolved sleep whose `until` is still ahead (handed back early) may end: the time
    left by PostgreSQL's clock, from now on this process's monotonic clock (so never early)."""
    due_in = float(record["due_in_s"] or 0.0)
    return time.monotonic() + due_in if kind == SLEEP and due_in > 0 else 0.0


def _handed(kind: str, record: Any, attempt: int) -> float | None:
    """How long ago the relay handed this sleep's run back, when this attempt is the one it was
    handed to (the next after the attempt that parked on it); None otherwise (a replay of an
    older sleep, a sleep resolved in-process, a take-over after a lost worker)."""
    handed = kind == SLEEP and record["resolved_by"] == "timer" and record["attempt"] == attempt - 1
    return float(record["handed_s"]) if handed else None


async def _record(
    uow: Unit,
    key: dict[str, Any],
    attempt: int,
    seconds: float | None,
    until: datetime | None,
    *,
    by: str | None = None,
    payload: Any = None,
) -> Any:
    return await uow.one(
        queries.RECORD_WAIT,
        **key,
        attempt=attempt,
        seconds=seconds,
        until=until,
        resolved_by=by,
        payload=as_json(payload) if by is not None else None,
    )


__all__ = [
    "MAX_IDEMPOTENCY_KEY",
    "MAX_NAME",
    "MAX_PAYLOAD_BYTES",
    "SIGNAL",
    "SLEEP",
    "Mailbox",
    "Parked",
    "Resolved",
    "SignalCheck",
    "SignalResult",
    "check_name",
    "check_wait_id",
    "encode_payload",
    "is_current_wait",
    "signal_run",
    "wait",
    "wait_id_of",
]
