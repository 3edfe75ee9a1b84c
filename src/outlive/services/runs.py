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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnElement,
    Select,
    case,
    func,
    literal,
    literal_column,
    select,
    tuple_,
    update,
)
from sqlalchemy import (
    insert as sa_insert,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import ACTIVE_STATUSES, Run, RunEvent, RunStatus
from outlive.db.tx import UnitOfWork
from outlive.errors import BadUserInput, NotFound, QueueUnavailable
from outlive.ids import RunId, TenantId
from outlive.services.ids import parse_uuid
from outlive.services.ports import RunInstances

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


def to_record(row: Any) -> RunRecord:
    m = row._mapping
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
    )


# Settle hooks: other nouns (webhooks) react to a settle inside the same unit of work. They are
# registered by the composition root, so this module does not import them.
SettleHook = Callable[[UnitOfWork, RunRecord], Awaitable[None]]


class SettleHooks:
    def __init__(self, hooks: Sequence[SettleHook] = ()) -> None:
        self.hooks = list(hooks)

    async def __call__(self, uow: UnitOfWork, run: RunRecord) -> None:
        for hook in self.hooks:
            await hook(uow, run)


NO_HOOKS = SettleHooks()


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
    on_settled: SettleHooks = NO_HOOKS,
) -> StartedRun:
    """Insert the run, or hand back the active one; the instance starts only after commit."""
    tenant_id = TenantId(uow.require_tenant())
    run, created = await _insert_or_get_active(uow.session, tenant_id, agent, params)
    if created:
        uow.nudge("run.created", run.id)

        async def start_instance() -> None:
            await _start_instance(uow, instances, run, on_settled)

        uow.after_commit(start_instance)
    return StartedRun(run=run, created=created)


async def _insert_or_get_active(
    session: AsyncSession, tenant_id: TenantId, agent: str, params: Mapping[str, Any]
) -> tuple[RunRecord, bool]:
    insert = (
        pg_insert(Run)
        .values(tenant_id=tenant_id, agent=agent, input=dict(params))
        .on_conflict_do_nothing(
            index_elements=["tenant_id", "agent"], index_where=is_active_predicate()
        )
        .returning(*_RUN_COLUMNS)
    )
    active = select(*_RUN_COLUMNS).where(
        Run.tenant_id == tenant_id, Run.agent == agent, is_active_predicate()
    )
    # The conflicting run can settle between the two statements; then the insert wins next time.
    for _ in range(10):
        row = (await session.execute(insert)).first()
        if row is not None:
            return to_record(row), True
        row = (await session.execute(active)).first()
        if row is not None:
            return to_record(row), False
    raise RuntimeError(f"could not insert or find the active {agent!r} run")


async def _start_instance(
    uow: UnitOfWork, instances: RunInstances, run: RunRecord, on_settled: SettleHooks
) -> None:
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
                on_settled=on_settled,
            )
        raise


# --- reading --------------------------------------------------------------------------------


async def get_run(session: AsyncSession, tenant_id: TenantId, run_id: RunId) -> RunRecord | None:
    stmt = select(*_RUN_COLUMNS).where(Run.id == run_id, Run.tenant_id == tenant_id)
    row = (await session.execute(stmt)).first()
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
    runs = [to_record(row) for row in (await session.execute(stmt)).all()]
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


async def move_run(
    uow: UnitOfWork,
    values: Mapping[str, Any],
    where: Sequence[ColumnElement[bool]],
    event_type: str | Callable[[Any], ColumnElement[str]],
    event_data: Mapping[str, Any],
    *,
    changes_run: bool = True,
    with_attempt: bool = False,
) -> tuple[RunRecord, int] | None:
    """One statement: the conditional UPDATE (bumping `event_seq`) and its timeline event.

    Returns the moved run and the new event's `seq`, or None when the predicate matched nothing.
    `event_type` is a string, or a function of the updated row (the `moved` CTE).
    `with_attempt` adds the run's attempt after the update to the event's data.
    """
    moved = (
        update(Run)
        .where(*where)
        .values(**values, event_seq=Run.event_seq + 1, updated_at=func.now())
        .returning(*_RUN_COLUMNS)
        .cte("moved")
    )
    kind = literal(event_type) if isinstance(event_type, str) else event_type(moved)
    data: ColumnElement[Any] = literal(dict(event_data), JSONB)
    if with_attempt:
        data = data.op("||", return_type=JSONB)(func.jsonb_build_object("attempt", moved.c.attempt))
    appended = (
        sa_insert(RunEvent)
        .from_select(
            ["run_id", "seq", "type", "data"], select(moved.c.id, moved.c.event_seq, kind, data)
        )
        .cte("appended")
    )
    stmt = select(*[moved.c[c.name] for c in _RUN_COLUMNS], moved.c.event_seq).add_cte(appended)
    row = (await uow.session.execute(stmt)).first()
    if row is None:
        return None
    run = to_record(row)
    if changes_run:
        uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
    uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    return run, int(row._mapping["event_seq"])


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
    on_settled: SettleHooks = NO_HOOKS,
) -> RunRecord | None:
    """The terminal write. Returns None when the predicate found nothing to settle."""
    if status not in SETTLED_STATUSES:
        raise ValueError(f"{status} is not a settled status")
    where = [Run.id == run_id, is_active_predicate()]
    if attempt is not None:
        where.append(Run.attempt == attempt)
    if stale_before_s is not None:
        grace = func.make_interval(0, 0, 0, 0, 0, 0, stale_before_s)
        where.append(Run.updated_at < func.now() - grace)
    data = dict(event_data or {})
    if error is not None:
        data.setdefault("error", error)
    moved = await move_run(
        uow,
        {"status": status.value, "output": output, "error": error, "finished_at": func.now()},
        where,
        status.value.lower(),
        data,
    )
    if moved is None:
        return None
    await on_settled(uow, moved[0])
    return moved[0]


async def cancel_run(
    uow: UnitOfWork, run_id: RunId, *, on_settled: SettleHooks = NO_HOOKS
) -> RunRecord:
    """QUEUED settles CANCELLED at once; RUNNING gets `cancel_requested_at`. Idempotent."""
    tenant_id = TenantId(uow.require_tenant())
    was_queued = Run.status == RunStatus.QUEUED.value
    moved = await move_run(
        uow,
        {
            "status": case((was_queued, RunStatus.CANCELLED.value), else_=Run.status),
            "finished_at": case((was_queued, func.now()), else_=Run.finished_at),
            "cancel_requested_at": func.coalesce(Run.cancel_requested_at, func.now()),
        },
        [
            Run.id == run_id,
            Run.tenant_id == tenant_id,
            was_queued
            | ((Run.status == RunStatus.RUNNING.value) & Run.cancel_requested_at.is_(None)),
        ],
        lambda moved: case(
            (moved.c.status == RunStatus.CANCELLED.value, "cancelled"), else_="cancel_requested"
        ),
        {},
    )
    if moved is not None:
        run = moved[0]
        if run.status is RunStatus.CANCELLED:
            await on_settled(uow, run)
        return run
    current = await get_run(uow.session, tenant_id, run_id)
    if current is None:
        raise NotFound(f"run {run_id} not found")
    return current


async def append_event(
    uow: UnitOfWork, run_id: RunId, type: str, data: Mapping[str, Any], *, attempt: int
) -> tuple[RunRecord, int] | None:
    """Append to an active run's timeline on behalf of `attempt`: the run as it is now and the
    event's `seq`, or None when `attempt` no longer holds the run."""
    moved = await move_run(
        uow,
        {},
        [Run.id == run_id, is_active_predicate(), Run.attempt == attempt],
        type,
        data,
        changes_run=False,  # an appended event changes no field a client shows: `run.event` only
    )
    return moved


def parse_run_id(value: str) -> RunId:
    return RunId(parse_uuid(value, what="run"))
