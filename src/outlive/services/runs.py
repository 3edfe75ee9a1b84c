"""Runs: the row is the claim.

Every statement that moves a run carries the active-status predicate (`status IN (QUEUED,
RUNNING)`), so a settled run is never rewritten; writes made on behalf of one attempt also carry
`attempt = <that attempt>`, a fencing token, so an attempt that was superseded by a re-claim cannot
settle or extend the run either. Timeline events are appended in the same statement that bumps
`runs.event_seq` (a data-modifying CTE), which keeps `seq` gap-free under concurrent emitters and
makes "settle + its timeline event" one atomic write.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    Select,
    column,
    literal,
    literal_column,
    select,
    text,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import ACTIVE_STATUSES, Run, RunEvent, RunStatus
from outlive.db.raw import Statement, prepare
from outlive.db.tx import Sessions, UnitOfWork
from outlive.errors import BadUserInput, NotFound, QueueUnavailable
from outlive.ids import RunId, TenantId
from outlive.services import webhooks
from outlive.services.ids import parse_uuid
from outlive.services.ports import RunInstances

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

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class EventRecord:
    seq: int
    type: str
    data: dict[str, Any]
    at: datetime


@dataclass(frozen=True, slots=True)
class StartedRun:
    run: RunRecord
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
) -> StartedRun:
    """Insert the run, or hand back the active one; the instance starts only after commit."""
    tenant_id = TenantId(uow.require_tenant())
    run, created = await _insert_or_get_active(uow, tenant_id, agent, params)
    if created:
        uow.nudge("run.created", run.id)

        async def start_instance() -> None:
            await _start_instance(uow, instances, run)

        uow.after_commit(start_instance)
    return StartedRun(run=run, created=created)


# SQL below is assembled from this module's constants only; every value is a bound parameter.
_INSERT = prepare(
    text(
        "INSERT INTO runs (tenant_id, agent, input)"
        " VALUES (:tenant_id, :agent, CAST(:input AS jsonb))"
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
    uow: UnitOfWork, tenant_id: TenantId, agent: str, params: Mapping[str, Any]
) -> tuple[RunRecord, bool]:
    values = {"tenant_id": tenant_id, "agent": agent, "input": json.dumps(dict(params))}
    # The conflicting run can settle between the two statements; then the insert wins next time.
    for _ in range(10):
        row = await uow.fetchrow(_INSERT, **values)
        if row is not None:
            return to_record(row), True
        row = await uow.fetchrow(_ACTIVE_RUN, tenant_id=tenant_id, agent=agent)
        if row is not None:
            return to_record(row), False
    raise RuntimeError(f"could not insert or find the active {agent!r} run")


async def _start_instance(uow: UnitOfWork, instances: RunInstances, run: RunRecord) -> None:
    try:
        await instances.start(run.id)
    except QueueUnavailable as exc:
        # The row must say what happened: settle it, which also frees the active slot.
        async with uow.sessions.unit(run.tenant_id) as follow_up:
            await settle_run(
                follow_up,
                run.id,
                RunStatus.FAILED,
                error=f"queue unavailable: the run could not be handed off ({exc.message})",
            )
        raise


# --- reading --------------------------------------------------------------------------------


async def read_run(sessions: Sessions, tenant_id: TenantId, run_id: RunId) -> RunRecord | None:
    """`get_run` as one statement on its own (the hot path: no session)."""
    row = await sessions.fetchrow(_GET_RUN, run_id=run_id, tenant_id=tenant_id)
    return to_record(row) if row is not None else None


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


async def list_runs(
    session: AsyncSession,
    tenant_id: TenantId,
    *,
    first: int,
    after: str | None = None,
    statuses: Sequence[RunStatus] | None = None,
    agent: str | None = None,
) -> RunPage:
    """Newest first, keyset-paginated on (created_at, id)."""
    if not 0 <= first <= MAX_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_PAGE}")
    stmt: Select[Any] = select(*_RUN_COLUMNS).where(Run.tenant_id == tenant_id)
    if after is not None:
        at, run_id = decode_cursor(after)
        stmt = stmt.where(tuple_(Run.created_at, Run.id) < tuple_(literal(at), literal(run_id)))
    if statuses:
        stmt = stmt.where(Run.status.in_([s.value for s in statuses]))
    if agent is not None:
        stmt = stmt.where(Run.agent == agent)
    stmt = stmt.order_by(Run.created_at.desc(), Run.id.desc()).limit(first + 1)
    runs = [to_record(row) for row in (await session.execute(stmt)).mappings().all()]
    page = runs[:first]
    return RunPage(
        runs=page, cursors=[encode_cursor(r) for r in page], has_next_page=len(runs) > first
    )


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
    """`list_runs` as one prepared statement on its own (the read path: no session)."""
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
            delivery_ids = ", ARRAY(SELECT id FROM delivered) AS delivery_ids"
            columns = (*_RUN_COLUMNS, column("delivery_ids"))
        return prepare(
            text(
                f"""WITH moved AS (UPDATE runs SET {sets} WHERE {where} RETURNING *),
                appended AS (INSERT INTO run_events (run_id, seq, type, data)
                             SELECT id, event_seq, {self.event_type}, {self.event_data} FROM moved)
                {deliveries}
                SELECT moved.*{delivery_ids} FROM moved"""
            ).columns(*columns)
        )


_SETTLE = "status = :status, output = CAST(:output AS jsonb), error = :error, finished_at = now()"
CLAIM = RunMove(
    sets="status = 'RUNNING', attempt = attempt + 1, started_at = coalesce(started_at, now())",
    event_type="'claimed'",
    event_data="jsonb_build_object('attempt', attempt)",
)
SETTLE = RunMove(sets=_SETTLE, event_type="lower(status)", may_settle=True)
SETTLE_ATTEMPT = RunMove(
    sets=_SETTLE, where="attempt = :attempt", event_type="lower(status)", may_settle=True
)
SETTLE_STALE = RunMove(
    sets=_SETTLE,
    where="updated_at < now() - make_interval(secs => :grace)",
    event_type="lower(status)",
    may_settle=True,
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
APPEND = RunMove(sets="", where="attempt = :attempt", changes_run=False)
REQUEUE = RunMove(sets="status = 'QUEUED'", where="status = 'RUNNING' AND attempt = :attempt")
RELEASE = RunMove(
    sets="status = 'QUEUED', attempt = attempt - 1",
    where="status = 'RUNNING' AND attempt = :attempt",
)


async def move_run(uow: UnitOfWork, move: RunMove, **params: Any) -> RunRecord | None:
    """Execute `move` for `params["run_id"]`; the moved run, or None when the predicate matched
    nothing. Nudges `run.event` (and `run.updated` when the move changes the run)."""
    row = await uow.fetchrow(move.statement, **params)
    if row is None:
        return None
    run = to_record(row)
    if move.changes_run:
        uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
    uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    if move.may_settle:
        webhooks.announce_deliveries(uow, run.tenant_id, row["delivery_ids"] or ())
    return run


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
    event_data: Mapping[str, Any] | None = None,
) -> RunRecord | None:
    """The terminal write. Returns None when the predicate found nothing to settle.

    `attempt` fences the write on that attempt; `stale_before_s` only settles a row that has not
    been updated for that long (reconcile)."""
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
    if attempt is not None:
        move, params["attempt"] = SETTLE_ATTEMPT, attempt
    elif stale_before_s is not None:
        move, params["grace"] = SETTLE_STALE, stale_before_s
    return await move_run(uow, move, **params)


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
    uow: UnitOfWork, run_id: RunId, type: str, data: Mapping[str, Any], *, attempt: int
) -> RunRecord | None:
    """Append to an active run's timeline on behalf of `attempt`: the run as it is now (its
    `event_seq` is the new event's seq), or None when `attempt` no longer holds the run."""
    return await move_run(
        uow, APPEND, run_id=run_id, attempt=attempt, type=type, data=json.dumps(dict(data))
    )


def parse_run_id(value: str) -> RunId:
    return RunId(parse_uuid(value, what="run"))
