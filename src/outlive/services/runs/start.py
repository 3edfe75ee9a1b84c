"""Starting a run: insert it, or meet the active run of its key as its strategy says.

RETURN_EXISTING hands the active run back; REJECT raises `RunActive` (nothing written); ENQUEUE
joins the end of the key's line (`queries.INSERT_BEHIND`); CANCEL_PREVIOUS cancels every run of
the line and joins its end, so the newest start is the one that runs; SIGNAL_EXISTING hands the
active run back for the caller to signal (`services.starts`). Lines change under a per-key
advisory lock, and the tail a run joins is locked until the commit, so its settle (whose trigger
moves the line on) comes after the run is behind it."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from outlive.db.models import RunConflict, RunStatus
from outlive.db.ports import RunInstances
from outlive.db.tx import StatementUnit, Unit
from outlive.errors import IdempotencyConflict, QueueUnavailable, RunActive
from outlive.ids import RunId, TenantId
from outlive.services import sealing
from outlive.services.runs import queries
from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.keys import DEFAULT_OPTIONS, StartOptions
from outlive.services.runs.moves import move_run
from outlive.services.runs.records import RunRecord, StartedRun, json_text, to_record
from outlive.services.runs.wakes import handoff_failed_runs
from outlive.telemetry import metrics

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

log = logging.getLogger(__name__)


async def start_run(
    uow: Unit,
    *,
    agent: str,
    params: Mapping[str, Any],
    instances: RunInstances,
    retried_from: RunId | None = None,
    options: StartOptions = DEFAULT_OPTIONS,
    cipher: AESGCM | None = None,
) -> StartedRun:
    """Insert the run, or meet the active run of its key; the instance starts only after commit.

    Handing back a QUEUED run (or one whose lease has expired) also enqueues its instance again,
    which is a no-op while one is queued, scheduled or executing (the job key is the run id): a
    client that retries after an API died between its commit and its enqueue gets a run that
    will run, not one that can only fail. `retried_from`: the run this one retries (`retryRun`,
    replays). A run queued behind another of its key starts when the line reaches it. `cipher`:
    the tenant's data cipher when it encrypts: the input is stored sealed (`services.sealing`)."""
    if options.in_a_transaction and isinstance(uow, StatementUnit):
        raise RuntimeError(f"{options.on_conflict} writes more than once: it needs a transaction")
    tenant_id = TenantId(uow.require_tenant())
    started = await _insert_or_meet(
        uow, tenant_id, agent, params, retried_from, options=options, cipher=cipher
    )
    _after_start(uow, tenant_id, started, instances)
    return started


async def insert_runs(
    uow: Unit,
    starts: Sequence[tuple[str, Mapping[str, Any], StartOptions]],
    instances: RunInstances,
    *,
    cipher: AESGCM | None = None,
) -> list[StartedRun]:
    """Insert many runs of the unit's tenant in one statement (the schedules' clock: no
    idempotency key, no debounce), each as `start_run` would when its key has no active run. A
    start whose key has one (or an earlier start of `starts` took it) is left out: the runs made,
    in order; the caller starts the others one by one under their strategy."""
    tenant_id = TenantId(uow.require_tenant())
    batch = [
        {
            "agent": agent,
            "key": options.key,
            "on_conflict": options.on_conflict.value,
            "tags": list(options.tags),
            "input": sealing.seal_value(cipher, dict(params)),
            "schedule_id": None if options.schedule_id is None else str(options.schedule_id),
            "scheduled_for": None
            if options.scheduled_for is None
            else options.scheduled_for.isoformat(),
            "priority": options.priority,
        }
        for agent, params, options in starts
        if options.idempotency_key is None and options.debounce is None
    ]
    if not batch:
        return []
    rows = await uow.all(
        queries.INSERT_RUNS,
        tenant_id=tenant_id,
        batch=json_text(batch),
        default_cap=uow.limits.max_running_runs,
        agents=uow.limits.agents,
    )
    made = [StartedRun(run=to_record(row), created=True) for row in rows]
    for started in made:
        _after_start(uow, tenant_id, started, instances)
    return made


def _after_start(
    uow: Unit, tenant_id: TenantId, started: StartedRun, instances: RunInstances
) -> None:
    """What a start does at the commit: admit or dispatch a waiting run, start a new one's
    instance, or enqueue again a met run's that may be lost."""
    run, created = started.run, started.created
    if created:
        metrics.RUNS_STARTED.labels(run.agent).inc()
        uow.nudge("run.created", run.id)
    if run.is_behind:
        pass  # its turn comes when the run ahead of it settles (`outlive_advance_line`)
    elif run.is_waiting and created:
        _admit_after_commit(uow, started)
    elif run.is_waiting:
        dispatch_after_commit(uow, tenant_id)
    elif created:

        async def start_instance() -> None:
            started.run = await _start_instance(uow, instances, run)

        uow.after_commit(start_instance)
    elif _may_have_lost_its_instance(run):

        async def repair_instance() -> None:
            try:
                await instances.start(run.id)
            except QueueUnavailable:
                log.warning("run %s: cannot re-enqueue it, the queue is unreachable", run.id)

        uow.after_commit(repair_instance)


def _admit_after_commit(uow: Unit, started: StartedRun) -> None:
    """A new run that waits for a slot (a capped tenant, or a key of its own): its tenant's
    dispatch after the commit, which admits it when a slot is free; the answer shows it so."""

    def admitted(run_ids: Sequence[UUID]) -> None:
        if started.run.id in run_ids:
            started.run = replace(started.run, dispatched_at=datetime.now(UTC))

    uow.admit_after_commit(started.run.tenant_id, "runs", queue_down_raises=True, then=admitted)


def _may_have_lost_its_instance(run: RunRecord) -> bool:
    if run.status == RunStatus.QUEUED:
        return True
    if run.status == RunStatus.WAITING:  # no instance, by design: its wake hands it over
        return False
    return run.lease_expires_at is None or run.lease_expires_at < datetime.now(UTC)


async def _insert_or_meet(
    uow: Unit,
    tenant_id: TenantId,
    agent: str,
    params: Mapping[str, Any],
    retried_from: RunId | None,
    *,
    options: StartOptions,
    cipher: AESGCM | None,
) -> StartedRun:
    values = {
        "tenant_id": tenant_id,
        "agent": agent,
        "key": options.key,
        "on_conflict": options.on_conflict.value,
        "tags": list(options.tags),
        "idempotency_key": options.idempotency_key,
        "input": json_text(sealing.seal_value(cipher, dict(params))),
        "retried_from_id": retried_from,
        "schedule_id": options.schedule_id,
        "scheduled_for": options.scheduled_for,
        "priority": options.priority,
        "debounce_s": None if options.debounce is None else options.debounce.seconds,
        "debounce_max_s": None if options.debounce is None else options.debounce.max_seconds,
        "default_cap": uow.limits.max_running_runs,
        "agents": uow.limits.agents,
    }
    # The conflicting run can settle between two statements; then the insert wins next time.
    for _ in range(20):
        if options.idempotency_key is not None:
            earlier = await _by_idempotency_key(uow, tenant_id, options.idempotency_key)
            if earlier is not None:
                _check_same_request(earlier, agent, params, options, cipher)
                return StartedRun(run=earlier, created=False, idempotent=True)
        if options.debounce is not None:
            held = await _debounce(uow, values)
            if held is not None:
                return held
        row = await uow.one(queries.INSERT_RUN, **values)
        if row is not None:
            return StartedRun(run=to_record(row), created=True)
        head = await uow.one(queries.ACTIVE_RUN, tenant_id=tenant_id, agent=agent, key=options.key)
        if head is None:
            continue
        met = await _meet(uow, to_record(head), options, values)
        if met is not None:
            return met
    raise RuntimeError(f"could not insert or find the active {agent!r} run of {options.key!r}")


async def _debounce(uow: Unit, values: Mapping[str, Any]) -> StartedRun | None:
    """A debounced start (contract §7 "Debounce"): the key's held-back run takes this input and
    waits on, and comes back with `created: false`; None: there is none, a new run is made (and
    the relay's clock told of its hold, at the commit)."""
    key = {k: values[k] for k in ("tenant_id", "agent", "key")}
    await uow.one(queries.LOCK_KEY, **key)
    row = await uow.one(
        queries.DEBOUNCE, **key, input=values["input"], debounce_s=values["debounce_s"]
    )
    await uow.one(queries.NOTIFY_CLOCK)
    if row is None:
        return None
    uow.nudge("run.updated", row["id"])
    return StartedRun(run=to_record(row), created=False)


async def _meet(
    uow: Unit, head: RunRecord, options: StartOptions, values: Mapping[str, Any]
) -> StartedRun | None:
    """The strategy, facing the key's active run `head`; None: look again (the line moved)."""
    strategy = options.on_conflict
    if strategy is RunConflict.REJECT:
        raise RunActive(head.id, f"run {head.id} is active for this key ({head.status.value})")
    if strategy in (RunConflict.RETURN_EXISTING, RunConflict.SIGNAL_EXISTING):
        return StartedRun(run=head, created=False)
    key = {"tenant_id": head.tenant_id, "agent": head.agent, "key": head.key}
    await uow.one(queries.LOCK_KEY, **key)
    if strategy is RunConflict.CANCEL_PREVIOUS:
        for member in await uow.all(queries.LINE, **key):
            await move_run(
                uow,
                queries.CANCEL,
                run_id=member["id"],
                tenant_id=head.tenant_id,
                by=None,
                reason="a newer run of its key (CANCEL_PREVIOUS)",
            )
        first = await uow.one(queries.INSERT_RUN, **values)  # the line may be empty now
        if first is not None:
            return StartedRun(run=to_record(first), created=True)
    behind = await uow.one(queries.INSERT_BEHIND, **values)
    return None if behind is None else StartedRun(run=to_record(behind), created=True)


def _check_same_request(
    earlier: RunRecord,
    agent: str,
    params: Mapping[str, Any],
    options: StartOptions,
    cipher: AESGCM | None,
) -> None:
    """The same idempotency key names the same request, or `IdempotencyConflict`: a client bug
    that sends another request under a used key is told, not handed someone else's run. A
    sealed input is compared opened (two seals of one input differ: each has its own nonce)."""
    earlier_input = sealing.open_value(cipher, earlier.input)
    differs = [
        what
        for what, same in (
            ("agent", earlier.agent == agent),
            ("input", earlier_input == json.loads(json_text(dict(params)))),
            ("key", earlier.key == options.key),
            ("tags", sorted(earlier.tags) == sorted(options.tags)),
        )
        if not same
    ]
    if differs:
        raise IdempotencyConflict(
            earlier.id,
            f"idempotencyKey {options.idempotency_key!r} was used within 24 h by run {earlier.id}"
            f" with another {', '.join(differs)}: use a new key for a new request",
        )


async def _by_idempotency_key(uow: Unit, tenant_id: TenantId, key: str) -> RunRecord | None:
    """The run this idempotency key named in the last 24 h; an older one lets the key go."""
    row = await uow.one(queries.BY_IDEMPOTENCY_KEY, tenant_id=tenant_id, idempotency_key=key)
    if row is None:
        return None
    if row["fresh"]:
        return to_record(row)
    await uow.one(queries.EXPIRE_IDEMPOTENCY_KEY, tenant_id=tenant_id, idempotency_key=key)
    return None


async def _start_instance(uow: Unit, instances: RunInstances, run: RunRecord) -> RunRecord:
    """The fast path; when the queue cannot take the run, it stays QUEUED and goes to the relay
    (`services.relay`), which hands it once the queue is back. The run as it is now."""
    try:
        await instances.start(run.id)
    except QueueUnavailable as exc:
        log.warning("run %s goes to the relay: %s", run.id, exc.message)
        rows = await handoff_failed_runs(uow.sessions, [run.id])
        return to_record(rows[0]) if rows else run
    return run
