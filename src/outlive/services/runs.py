"""Runs: the row is the claim, and the claim's lease lives in the row.

Every statement that moves a run carries the active-status predicate (`status IN (QUEUED,
RUNNING)`), so a settled run is never rewritten; writes made on behalf of one attempt also carry
`attempt = <that attempt>`, a fencing token, so an attempt that was superseded by a re-claim cannot
settle or extend the run either. A claim takes a run only when it is QUEUED, or RUNNING with an
expired lease (`lease_expires_at`): the attempt that holds a run extends its lease with every
heartbeat and every timeline event, so a second delivery of the same run cannot claim it while
the first is alive, whatever the queue does. Taking over an expired lease counts a lost attempt
(`lost_attempts`) and writes a `lost` event before the `claimed` one.

Timeline events are appended in the same statement that bumps `runs.event_seq` (a data-modifying
CTE), which keeps `seq` gap-free under concurrent emitters and makes "settle + its timeline event"
one atomic write.

Why this module is over 600 lines: every statement that writes a run is here, beside the record
they return, so that the one predicate they all carry (and the lease, the fencing token and the
admission columns they keep consistent) can be reviewed in one place.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    column,
    literal_column,
    select,
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import ACTIVE_STATUSES, Run, RunEvent, RunStatus
from outlive.db.raw import Statement, prepare
from outlive.db.tx import Sessions, UnitOfWork
from outlive.errors import BadUserInput, NotFound, QueueUnavailable
from outlive.ids import RunId, TenantId
from outlive.services import relay, webhooks
from outlive.services.ids import parse_uuid
from outlive.services.ports import RunInstances
from outlive.telemetry import logs, metrics

log = logging.getLogger(__name__)

ACTIVE_SQL = "status IN ('QUEUED', 'RUNNING')"  # literal values: see `is_active_predicate`
SETTLED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
_RUN_COLUMNS = tuple(Run.__table__.c)
MAX_PAGE = 100
MAX_EVENTS_PAGE = 1000


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: RunId
    tenant_id: TenantId
    agent: str
    status: RunStatus
    attempt: int
    input: dict[str, Any]
    output: Any
    error: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    event_seq: int = 0
    lease_expires_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lost_attempts: int = 0
    dispatched_at: datetime | None = None
    retried_from_id: RunId | None = None
    handoff_failed_at: datetime | None = None  # the queue could not take it; the relay will

    @property
    def is_waiting(self) -> bool:
        """QUEUED and not admitted yet: waiting for a slot under its tenant's cap."""
        return self.status == RunStatus.QUEUED and self.dispatched_at is None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class EventRecord:
    seq: int
    type: str
    data: dict[str, Any]
    at: datetime


@dataclass(slots=True)
class StartedRun:
    run: RunRecord  # replaced after the commit when the queue could not take the run
    created: bool


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[RunRecord]
    cursors: list[str]
    has_next_page: bool


def to_record(m: Mapping[Any, Any]) -> RunRecord:
    return RunRecord(
        id=RunId(m["id"]),
        tenant_id=TenantId(m["tenant_id"]),
        agent=m["agent"],
        status=RunStatus(m["status"]),
        attempt=m["attempt"],
        input=m["input"],
        output=m["output"],
        error=m["error"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        cancel_requested_at=m["cancel_requested_at"],
        event_seq=m["event_seq"],
        lease_expires_at=m["lease_expires_at"],
        heartbeat_at=m["heartbeat_at"],
        lost_attempts=m["lost_attempts"],
        dispatched_at=m["dispatched_at"],
        retried_from_id=m["retried_from_id"],
        handoff_failed_at=m["handoff_failed_at"],
    )


def is_active_predicate() -> ColumnElement[bool]:
    """`status IN ('QUEUED', 'RUNNING')` with literal values, never bind parameters: the
    planner must see that it implies the partial unique index's predicate (for ON CONFLICT and
    for using the index), including in the generic plans of prepared statements."""
    return Run.status.in_([literal_column(f"'{s.value}'") for s in ACTIVE_STATUSES])


# --- starting -------------------------------------------------------------------------------


async def start_run(
    uow: UnitOfWork,
    *,
    agent: str,
    params: Mapping[str, Any],
    instances: RunInstances,
    retried_from: RunId | None = None,
) -> StartedRun:
    """Insert the run, or hand back the active one; the instance starts only after commit.

    Handing back a QUEUED run (or one whose lease has expired) also enqueues its instance again,
    which is a no-op while one is queued, scheduled or executing (the job key is the run id): a
    client that retries after an API died between its commit and its enqueue gets a run that
    will run, not one that can only fail. `retried_from`: the run this one retries (`retryRun`,
    replays)."""
    tenant_id = TenantId(uow.require_tenant())
    run, created = await _insert_or_get_active(uow, tenant_id, agent, params, retried_from)
    if created:
        metrics.RUNS_STARTED.labels(run.agent).inc()
        uow.nudge("run.created", run.id)
    started = StartedRun(run=run, created=created)
    if run.is_waiting:
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
    return started


def dispatch_after_commit(uow: UnitOfWork, tenant_id: TenantId) -> None:
    """After the commit, admit the tenant's waiting runs up to its cap (and enqueue them)."""
    admission = uow.sessions.admission
    if admission is None:
        raise RuntimeError("no admission is wired: a waiting run is never started inline")

    async def dispatch() -> None:
        await admission.dispatch_runs(tenant_id)

    uow.after_commit(dispatch)


def _may_have_lost_its_instance(run: RunRecord) -> bool:
    if run.status == RunStatus.QUEUED:
        return True
    return run.lease_expires_at is None or run.lease_expires_at < datetime.now(UTC)


# SQL below is assembled from this module's constants only; every value is a bound parameter.
# Admitted at once when its tenant's cap is at least the number of agents (it can never be
# exceeded then: one active run per agent); otherwise written waiting for a dispatch.
_INSERT = prepare(
    text(
        "INSERT INTO runs (tenant_id, agent, input, retried_from_id, dispatched_at)"
        " VALUES (:tenant_id, :agent, CAST(:input AS jsonb), :retried_from_id, CASE WHEN coalesce("
        "(SELECT max_running_runs FROM tenants WHERE id = :tenant_id), :default_cap) >= :agents"
        " THEN now() END)"
        f" ON CONFLICT (tenant_id, agent) WHERE {ACTIVE_SQL} DO NOTHING RETURNING *"
    ).columns(*_RUN_COLUMNS)
)
_ACTIVE_RUN = prepare(
    text(
        f"SELECT * FROM runs WHERE tenant_id = :tenant_id AND agent = :agent AND {ACTIVE_SQL}"
    ).columns(*_RUN_COLUMNS)
)
_GET_RUN = prepare(
    text("SELECT * FROM runs WHERE id = :run_id AND tenant_id = :tenant_id").columns(*_RUN_COLUMNS)
)


async def _insert_or_get_active(
    uow: UnitOfWork,
    tenant_id: TenantId,
    agent: str,
    params: Mapping[str, Any],
    retried_from: RunId | None = None,
) -> tuple[RunRecord, bool]:
    admission = uow.sessions.admission
    values = {
        "tenant_id": tenant_id,
        "agent": agent,
        "input": json.dumps(dict(params)),
        "retried_from_id": retried_from,
        "default_cap": 0 if admission is None else admission.max_running_runs,
        "agents": 0 if admission is None else admission.agents,
    }
    # The conflicting run can settle between the two statements; then the insert wins next time.
    for _ in range(10):
        row = await uow.fetchrow(_INSERT, **values)
        if row is not None:
            return to_record(row), True
        row = await uow.fetchrow(_ACTIVE_RUN, tenant_id=tenant_id, agent=agent)
        if row is not None:
            return to_record(row), False
    raise RuntimeError(f"could not insert or find the active {agent!r} run")


async def _start_instance(uow: UnitOfWork, instances: RunInstances, run: RunRecord) -> RunRecord:
    """The fast path; when the queue cannot take the run, it stays QUEUED and goes to the relay
    (`services.relay`), which hands it once the queue is back. The run as it is now."""
    try:
        await instances.start(run.id)
    except QueueUnavailable as exc:
        log.warning("run %s goes to the relay: %s", run.id, exc.message)
        rows = await relay.handoff_failed_runs(uow.sessions, [run.id])
        return to_record(rows[0]) if rows else run
    return run


# --- reading --------------------------------------------------------------------------------


async def read_run(sessions: Sessions, tenant_id: TenantId, run_id: RunId) -> RunRecord | None:
    """`get_run` as one statement on its own (the hot path: no session)."""
    row = await sessions.fetchrow(_GET_RUN, run_id=run_id, tenant_id=tenant_id)
    return to_record(row) if row is not None else None


_LEASE_LEFT = prepare(
    text(
        "SELECT status, dispatched_at, extract(epoch FROM lease_expires_at - now()) AS left_s"
        " FROM runs WHERE id = :run_id"
    )
)


async def lease_left(sessions: Sessions, run_id: RunId) -> float | None:
    """For a delivery that could not claim the run: None when the run is settled (or gone), or
    waiting for a slot (its admission enqueues it again); otherwise the seconds left on the
    lease of the attempt holding it (0 when QUEUED)."""
    row = await sessions.fetchrow(_LEASE_LEFT, run_id=run_id)
    if row is None or row["status"] not in ACTIVE_STATUSES:
        return None
    if row["status"] == RunStatus.QUEUED and row["dispatched_at"] is None:
        return None
    return float(row["left_s"] or 0.0)


async def get_run(session: AsyncSession, tenant_id: TenantId, run_id: RunId) -> RunRecord | None:
    row = (
        (await session.execute(_GET_RUN.clause, {"run_id": run_id, "tenant_id": tenant_id}))
        .mappings()
        .first()
    )
    return to_record(row) if row is not None else None


def encode_cursor(run: RunRecord) -> str:
    raw = f"{run.created_at.isoformat()}|{run.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, run_id = raw.partition("|")
        return datetime.fromisoformat(at), UUID(run_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadUserInput(f"{cursor!r} is not a valid cursor") from None


_PAGE = prepare(
    text(
        "SELECT * FROM runs WHERE tenant_id = :tenant_id"
        " AND (CAST(:after_at AS timestamptz) IS NULL"
        " OR (created_at, id) < (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid)))"
        " AND (CAST(:statuses AS text[]) IS NULL OR status = ANY(CAST(:statuses AS text[])))"
        " AND (CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text))"
        " ORDER BY created_at DESC, id DESC LIMIT :limit"
    ).columns(*_RUN_COLUMNS)
)


async def read_runs(
    sessions: Sessions,
    tenant_id: TenantId,
    *,
    first: int,
    after: str | None = None,
    statuses: Sequence[RunStatus] | None = None,
    agent: str | None = None,
) -> RunPage:
    """A page of the tenant's runs, newest first, keyset-paginated on (created_at, id): one
    prepared statement on its own (the read path: no session)."""
    if not 0 <= first <= MAX_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_PAGE}")
    at, run_id = decode_cursor(after) if after is not None else (None, None)
    rows = await sessions.fetch(
        _PAGE,
        tenant_id=tenant_id,
        after_at=at,
        after_id=run_id,
        statuses=[s.value for s in statuses] if statuses else None,
        agent=agent,
        limit=first + 1,
    )
    runs = [to_record(row) for row in rows]
    page = runs[:first]
    return RunPage(
        runs=page, cursors=[encode_cursor(r) for r in page], has_next_page=len(runs) > first
    )


async def list_events(
    session: AsyncSession, run_id: RunId, *, after: int = 0, first: int = 100
) -> list[EventRecord]:
    if not 0 <= first <= MAX_EVENTS_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_EVENTS_PAGE}")
    stmt = (
        select(RunEvent.seq, RunEvent.type, RunEvent.data, RunEvent.at)
        .where(RunEvent.run_id == run_id, RunEvent.seq > after)
        .order_by(RunEvent.seq)
        .limit(first)
    )
    return [EventRecord(*row) for row in (await session.execute(stmt)).all()]


# --- moving a run: every write below carries the predicate -----------------------------------


@dataclass(frozen=True)
class RunMove:
    """A conditional UPDATE of one run and its timeline event, as one SQL statement.

    `sets` and `where` are SQL over `runs`; `event_type` and `event_data` are SQL over the
    updated row. The statement is built once per kind (these are module constants) and always
    carries `id = :run_id AND status IN ('QUEUED', 'RUNNING')`.
    """

    sets: str
    where: str = ""
    event_type: str = ":type"
    event_data: str = "CAST(:data AS jsonb)"
    changes_run: bool = True
    may_settle: bool = False  # also writes the webhook deliveries of a settle, in the statement

    @cached_property
    def statement(self) -> Statement:
        sets = ", ".join(
            p for p in (self.sets, "event_seq = event_seq + 1, updated_at = now()") if p
        )
        where = f"id = :run_id AND {ACTIVE_SQL}" + (f" AND {self.where}" if self.where else "")
        deliveries, delivery_ids, columns = "", "", _RUN_COLUMNS
        if self.may_settle:
            deliveries = f",\n{webhooks.SETTLED_DELIVERIES_CTE}"
            delivery_ids = (
                ", ARRAY(SELECT id FROM delivered) AS delivery_ids, (SELECT max_running_runs"
                " FROM tenants WHERE id = moved.tenant_id) AS tenant_max_running"
            )
            columns = (*_RUN_COLUMNS, column("delivery_ids"), column("tenant_max_running"))
        return prepare(
            text(
                f"""WITH moved AS (UPDATE runs SET {sets} WHERE {where} RETURNING *),
                appended AS (INSERT INTO run_events (run_id, seq, type, data)
                             SELECT id, event_seq, {self.event_type}, {self.event_data} FROM moved)
                {deliveries}
                SELECT moved.*{delivery_ids} FROM moved"""
            ).columns(*columns)
        )


_SETTLE = (
    "status = :status, output = CAST(:output AS jsonb), error = :error, finished_at = now(), "
    "lease_expires_at = NULL"
)
# The lease of the attempt holding a RUNNING run, extended by its heartbeats and its events.
_LEASE = "lease_expires_at = now() + make_interval(secs => :lease), heartbeat_at = now()"
LEASE_EXPIRED_SQL = "coalesce(lease_expires_at, '-infinity') < now()"
_LOST_LONG_AGO = (
    "status = 'RUNNING' AND attempt = :attempt"
    " AND coalesce(lease_expires_at, '-infinity') < now() - make_interval(secs => :grace)"
)
SETTLE = RunMove(sets=_SETTLE, event_type="lower(status)", may_settle=True)
SETTLE_ATTEMPT = RunMove(
    sets=_SETTLE, where="attempt = :attempt", event_type="lower(status)", may_settle=True
)
SETTLE_STALE = RunMove(  # an instance lost (reconcile): never a run whose attempt is alive
    sets=_SETTLE,
    where=f"updated_at < now() - make_interval(secs => :grace)"
    f" AND (status = 'QUEUED' OR {LEASE_EXPIRED_SQL})",
    event_type="lower(status)",
    may_settle=True,
)
SETTLE_LOST = RunMove(
    sets=_SETTLE, where=_LOST_LONG_AGO, event_type="lower(status)", may_settle=True
)
LOST = RunMove(  # a worker lost long ago (reconcile): back to QUEUED, the attempt counted as lost
    sets="status = 'QUEUED', lease_expires_at = NULL, lost_attempts = lost_attempts + 1",
    where=_LOST_LONG_AGO,
    event_type="'lost'",
)
CANCEL = RunMove(
    sets="status = CASE WHEN status = 'QUEUED' THEN 'CANCELLED' ELSE status END, "
    "finished_at = CASE WHEN status = 'QUEUED' THEN now() ELSE finished_at END, "
    "cancel_requested_at = coalesce(cancel_requested_at, now())",
    where="tenant_id = :tenant_id AND (status = 'QUEUED' OR cancel_requested_at IS NULL)",
    event_type="CASE WHEN status = 'CANCELLED' THEN 'cancelled' ELSE 'cancel_requested' END",
    event_data="'{}'::jsonb",
    may_settle=True,  # a QUEUED run settles CANCELLED at once
)
APPEND = RunMove(sets=_LEASE, where="attempt = :attempt", changes_run=False)
REQUEUE = RunMove(
    sets="status = 'QUEUED', lease_expires_at = NULL",
    where="status = 'RUNNING' AND attempt = :attempt",
)
RELEASE = RunMove(
    sets="status = 'QUEUED', attempt = attempt - 1, lease_expires_at = NULL",
    where="status = 'RUNNING' AND attempt = :attempt",
)

# The claim: QUEUED, or RUNNING with an expired lease (its worker was lost). `prior` locks the row
# first, so `was` is the status the UPDATE really replaced, also when a concurrent claim won and
# the UPDATE re-checks its predicate on the newer row. Taking over a lost attempt counts it and
# writes `lost` just before `claimed`, in the same statement.
_LOST_REASON = "its worker stopped heartbeating and the lease expired"
CLAIM = prepare(
    text(
        f"""WITH prior AS (SELECT id, status AS was FROM runs WHERE id = :run_id FOR UPDATE),
        moved AS (
            UPDATE runs SET status = 'RUNNING', attempt = attempt + 1,
                started_at = coalesce(started_at, now()), {_LEASE},
                lost_attempts = lost_attempts + CAST(prior.was = 'RUNNING' AS int),
                event_seq = event_seq + 1 + CAST(prior.was = 'RUNNING' AS int), updated_at = now()
            FROM prior
            WHERE runs.id = prior.id
              AND ((runs.status = 'QUEUED' AND runs.dispatched_at IS NOT NULL)
                   OR (runs.status = 'RUNNING' AND {LEASE_EXPIRED_SQL}))
            RETURNING runs.*, prior.was),
        appended AS (
            INSERT INTO run_events (run_id, seq, type, data)
            SELECT id, event_seq - 1, 'lost',
                   jsonb_build_object('attempt', attempt - 1, 'reason', '{_LOST_REASON}')
            FROM moved WHERE was = 'RUNNING'
            UNION ALL
            SELECT id, event_seq, 'claimed', jsonb_build_object('attempt', attempt) FROM moved)
        SELECT moved.* FROM moved"""
    ).columns(*_RUN_COLUMNS, column("was"))
)
# A heartbeat: the attempt still holds the run; its lease is extended. No event, no nudge.
HEARTBEAT = prepare(
    text(
        f"UPDATE runs SET {_LEASE} WHERE id = :run_id AND status = 'RUNNING'"
        " AND attempt = :attempt RETURNING cancel_requested_at"
    )
)


async def move_run(uow: UnitOfWork, move: RunMove, **params: Any) -> RunRecord | None:
    """Execute `move` for `params["run_id"]`; the moved run, or None when the predicate matched
    nothing. Nudges `run.event` (and `run.updated` when the move changes the run)."""
    row = await uow.fetchrow(move.statement, **params)
    if row is None:
        return None
    return _announce(uow, row, changes_run=move.changes_run, may_settle=move.may_settle)


def _announce(
    uow: UnitOfWork, row: Mapping[Any, Any], *, changes_run: bool, may_settle: bool
) -> RunRecord:
    run = to_record(row)
    logs.bind(tenant_id=run.tenant_id, run_id=run.id, agent=run.agent)
    if run.status in SETTLED_STATUSES:
        metrics.RUNS_SETTLED.labels(run.agent, run.status.value).inc()
    if changes_run:
        uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
    uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    if may_settle:
        webhooks.announce_deliveries(uow, run.tenant_id, row["delivery_ids"] or ())
        admission = uow.sessions.admission
        if (
            not run.is_active
            and run.dispatched_at is not None
            and admission is not None
            and admission.runs_capped(row["tenant_max_running"])
        ):  # it held one of its tenant's slots: the next waiting run may have it
            dispatch_after_commit(uow, run.tenant_id)
    return run


async def claim(uow: UnitOfWork, run_id: RunId, *, lease_s: float) -> RunRecord | None:
    """Take the run for a new attempt holding a lease of `lease_s`; None when it is settled, or
    RUNNING under a live lease (another attempt holds it)."""
    row = await uow.fetchrow(CLAIM, run_id=run_id, lease=lease_s)
    if row is None:
        return None
    return _announce(uow, row, changes_run=True, may_settle=False)


@dataclass(frozen=True, slots=True)
class Beat:
    """What a heartbeat found: the attempt still holds the run; whether a cancel was asked."""

    cancel_requested: bool


async def heartbeat(uow: UnitOfWork, run_id: RunId, *, attempt: int, lease_s: float) -> Beat | None:
    """Extend `attempt`'s lease; None when it no longer holds the run (settled or taken over)."""
    row = await uow.fetchrow(HEARTBEAT, run_id=run_id, attempt=attempt, lease=lease_s)
    return None if row is None else Beat(cancel_requested=row["cancel_requested_at"] is not None)


def as_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


async def settle_run(
    uow: UnitOfWork,
    run_id: RunId,
    status: RunStatus,
    *,
    output: Any = None,
    error: str | None = None,
    attempt: int | None = None,
    stale_before_s: float | None = None,
    lost_before_s: float | None = None,
    event_data: Mapping[str, Any] | None = None,
) -> RunRecord | None:
    """The terminal write. Returns None when the predicate found nothing to settle.

    `attempt` fences the write on that attempt; `stale_before_s` only settles a row that has not
    been updated for that long and holds no live lease (reconcile: a lost instance);
    `lost_before_s` (with `attempt`) only settles a RUNNING run whose lease expired that long ago
    (reconcile: a lost worker)."""
    if status not in SETTLED_STATUSES:
        raise ValueError(f"{status} is not a settled status")
    data = dict(event_data or {})
    if error is not None:
        data.setdefault("error", error)
    params: dict[str, Any] = {
        "run_id": run_id,
        "status": status.value,
        "output": as_json(output),
        "error": error,
        "data": json.dumps(data),
    }
    move = SETTLE
    if attempt is not None and lost_before_s is not None:
        move, params["attempt"], params["grace"] = SETTLE_LOST, attempt, lost_before_s
    elif attempt is not None:
        move, params["attempt"] = SETTLE_ATTEMPT, attempt
    elif stale_before_s is not None:
        move, params["grace"] = SETTLE_STALE, stale_before_s
    return await move_run(uow, move, **params)


async def requeue_lost(uow: UnitOfWork, run: RunRecord, *, grace_s: float) -> RunRecord | None:
    """A RUNNING run whose lease expired more than `grace_s` ago: its worker was lost and nothing
    re-delivered it. Back to QUEUED with a `lost` event, the attempt counted as lost; None when
    the run moved meanwhile."""
    return await move_run(
        uow,
        LOST,
        run_id=run.id,
        attempt=run.attempt,
        grace=grace_s,
        data=json.dumps({"attempt": run.attempt, "reason": "its lease expired; re-enqueued"}),
    )


async def cancel_run(uow: UnitOfWork, run_id: RunId) -> RunRecord:
    """QUEUED settles CANCELLED at once; RUNNING gets `cancel_requested_at`. Idempotent."""
    tenant_id = TenantId(uow.require_tenant())
    run = await move_run(uow, CANCEL, run_id=run_id, tenant_id=tenant_id)
    if run is not None:
        return run
    current = await get_run(uow.session, tenant_id, run_id)
    if current is None:
        raise NotFound(f"run {run_id} not found")
    return current


async def append_event(
    uow: UnitOfWork,
    run_id: RunId,
    type: str,
    data: Mapping[str, Any],
    *,
    attempt: int,
    lease_s: float,
) -> RunRecord | None:
    """Append to an active run's timeline on behalf of `attempt`, extending its lease: the run as
    it is now (its `event_seq` is the new event's seq), or None when `attempt` no longer holds
    the run."""
    return await move_run(
        uow,
        APPEND,
        run_id=run_id,
        attempt=attempt,
        lease=lease_s,
        type=type,
        data=json.dumps(dict(data)),
    )


def parse_run_id(value: str) -> RunId:
    return RunId(parse_uuid(value, what="run"))
