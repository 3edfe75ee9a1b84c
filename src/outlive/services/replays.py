"""Retry and replay: settled runs started again with the same input, linked by `retried_from_id`.

- `retry_run`: one run, now, through the same path as `startRun`. The input is validated against
  the agent as it is today. One active run per agent still holds: when the agent already has a
  QUEUED or RUNNING run (the source itself included), that run is handed back with
  `created = false`, exactly as `startRun` does.
- `create_replay` / `advance_replay`: a bounded bulk replay. The request only writes a
  `run_replays` row (the filter, the pace, the count of runs it will replay, capped) and queues
  its first `run.replay.v1` job; each job is one tick that starts at most `rate` runs per second
  of the tick, oldest first, moves the row's cursor, nudges `replay.updated` and queues the next
  tick. Only runs created before the replay are selected, so the runs it starts (which may fail
  again) are never replayed by it. A run whose agent has an active run waits (the tick stops
  there and the next one tries again: `waiting_for_run_id`); a run whose input no longer
  validates is skipped and counted. A tenant has at most one RUNNING replay (and one RUNNING
  bulk cancel: `services.bulk_cancels` shares the row, the ticks and the Stop). Every run a tick
  starts first takes a token from the tenant's `startRun` bucket (`admit`); when it is spent,
  the tick stops there and the next one goes on.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import ReplayKind, ReplayStatus, Run, RunConflict, RunReplay, RunStatus
from outlive.db.models.base import columns_of
from outlive.db.ports import RunInstances
from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import Db, UnitOfWork
from outlive.errors import BadUserInput, NotFound
from outlive.ids import RunId, TenantId
from outlive.services import runs, sealing, starts
from outlive.services.bulk_filters import RunsFilter, count_matching, next_matching
from outlive.services.runs.keys import StartOptions
from outlive.services.sealing import open_value

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

REPLAY_JOB = "run.replay.v1"
DEFAULT_STATUSES = (RunStatus.FAILED,)
MAX_REPLAYS_PAGE = 100

# (agent name, stored input) -> the input as the agent validates it today; raises BadUserInput.
Validate = Callable[[str, Mapping[str, Any]], Mapping[str, Any]]
# (tenant) -> whether one more run may start now (the tenant's startRun rate); None: always.
Admit = Callable[[UUID], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class ReplayRecord(Record):
    """A replay or a bulk cancel (`kind`), as its row says."""

    id: UUID
    kind: ReplayKind
    status: ReplayStatus
    statuses: list[RunStatus]
    agent: str | None
    since: datetime | None
    before: datetime | None
    key: str | None
    tags: list[str]
    top_level: bool
    reason: str | None
    requested_by: str | None
    rate: float
    total: int
    started: int
    skipped: int
    cancelled: int
    waiting_for_run_id: UUID | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @property
    def processed(self) -> int:
        return self.started + self.skipped + self.cancelled


# --- retryRun --------------------------------------------------------------------------------


async def retry_run(
    uow: UnitOfWork,
    run_id: RunId,
    *,
    validate: Validate,
    instances: RunInstances,
    input: Mapping[str, Any] | None = None,
    reuse_steps: bool = False,
    cipher: AESGCM | None = None,
) -> runs.StartedRun:
    """A new run with `run_id`'s agent, input (or `input`, validated as for `startRun`), key,
    tags and strategy (`onConflict`): the key's active run is met as the original start would have
    met it (handed back, queued behind, cancelled, refused with RUN_ACTIVE, or signalled).
    `reuse_steps`: the new run starts with a copy of the old run's journal, so it resumes at the
    first step the old one did not finish (those steps saw the old input); only a settled run's
    steps are reused. `cipher`: the tenant's data cipher when it encrypts (the old input is
    opened to be validated, the new run's is sealed)."""
    tenant_id = TenantId(uow.require_tenant())
    source = await runs.read_run(uow, tenant_id, run_id)
    if source is None:
        raise NotFound(f"run {run_id} not found")
    if reuse_steps and source.is_active:
        raise BadUserInput("only a settled run's steps can be reused: cancel it first")
    params = validate(source.agent, open_value(cipher, source.input) if input is None else input)
    started = await starts.start(
        uow,
        agent=source.agent,
        params=params,
        instances=instances,
        retried_from=source.id,
        options=options_of(source.key, source.on_conflict, source.tags),
        cipher=cipher,
    )
    if reuse_steps and started.created and source.step_seq:
        await runs.copy_steps(uow, from_run=source.id, to_run=started.run.id)
    return started


# A replay never refuses nor signals: it waits for the key's active run instead (as a start
# that hands it back does), and goes on once that run has settled.
_REPLAYED = frozenset({RunConflict.REJECT, RunConflict.SIGNAL_EXISTING})


def options_of(
    key: str, on_conflict: str | None, tags: Sequence[str], *, replay: bool = False
) -> StartOptions:
    """The options a retry or a replay of a run starts with: the original's key, tags and
    strategy (a replay turns REJECT and SIGNAL_EXISTING into RETURN_EXISTING)."""
    strategy = RunConflict(on_conflict) if on_conflict else RunConflict.RETURN_EXISTING
    if replay and strategy in _REPLAYED:
        strategy = RunConflict.RETURN_EXISTING
    return StartOptions(key=key, on_conflict=strategy, tags=tuple(tags))


# --- replayRuns ------------------------------------------------------------------------------


def check_pace(rate: float, limit: int, *, max_rate: float, max_runs: int) -> None:
    """A bulk action's pace and bound, as replays and bulk cancels check them."""
    if not 0 < rate <= max_rate:
        raise BadUserInput(f"rate must be more than 0 and at most {max_rate:g} runs per second")
    if limit < 1:
        raise BadUserInput("limit must be at least 1")
    if limit > max_runs:
        raise BadUserInput(f"a bulk action takes at most {max_runs} runs (limit)")


def replay_statuses(statuses: Sequence[RunStatus] | None) -> list[RunStatus]:
    """The statuses a replay takes: settled ones only, [FAILED] when none are given."""
    chosen = list(dict.fromkeys(statuses or DEFAULT_STATUSES))
    active = [s.value for s in chosen if s not in runs.SETTLED_STATUSES]
    if active:
        raise BadUserInput(f"only settled runs can be replayed, not {', '.join(active)}")
    return chosen


async def create_replay(
    uow: UnitOfWork,
    *,
    filter: RunsFilter,
    rate: float,
    limit: int,
    max_rate: float,
    max_runs: int,
) -> ReplayRecord:
    """The replay row and its first tick (after the commit); the work happens in jobs."""
    check_pace(rate, limit, max_rate=max_rate, max_runs=max_runs)
    return await create_bulk(uow, ReplayKind.REPLAY, filter, {"rate": rate}, limit=limit)


async def create_bulk(
    uow: UnitOfWork,
    kind: ReplayKind,
    filter: RunsFilter,
    values: dict[str, Any],
    *,
    limit: int,
) -> ReplayRecord:
    """A bulk action's row (`values`: its pace and what else its kind records), counted now,
    and its first tick after the commit; BadUserInput while one of its kind still runs."""
    tenant_id = uow.require_tenant()
    total = await count_matching(uow.session, tenant_id, filter, kind, limit=limit)
    values = {"tenant_id": tenant_id, "kind": kind.value, "total": total, **values}
    values |= filter.columns()
    if not total:
        values |= {"status": ReplayStatus.DONE.value, "finished_at": func.now()}
    replay = await _insert_replay(uow.session, values)
    if replay is None:
        running = await uow.session.scalar(
            select(RunReplay.id).where(
                RunReplay.tenant_id == tenant_id,
                RunReplay.kind == kind.value,
                RunReplay.status == ReplayStatus.RUNNING.value,
            )
        )
        what = "replay" if kind is ReplayKind.REPLAY else "bulk cancel"
        raise BadUserInput(f"{what} {running} is still running: wait for it or stop it")
    if replay.status == ReplayStatus.RUNNING:
        _queue_tick(uow, replay.id, tick=0, delay_s=0.0)
    uow.nudge("replay.updated", replay.id)
    return replay


async def count_replay(uow: UnitOfWork, *, filter: RunsFilter, limit: int, max_runs: int) -> int:
    """How many runs `replayRuns` with these arguments would take now (checked as it checks
    them): the count a person sees before confirming a bulk replay."""
    check_pace(1.0, limit, max_rate=1.0, max_runs=max_runs)
    return await count_matching(
        uow.session, uow.require_tenant(), filter, ReplayKind.REPLAY, limit=limit
    )


async def _insert_replay(session: AsyncSession, values: dict[str, Any]) -> ReplayRecord | None:
    stmt = (
        pg_insert(RunReplay)
        .values(**values)
        .on_conflict_do_nothing(
            # A literal, never a bound parameter: under a generic plan a parameter has no value,
            # and PostgreSQL can no longer infer the partial index (tests/db/test_generic_plans.py).
            index_elements=["tenant_id", "kind"],
            index_where=text(f"status = '{ReplayStatus.RUNNING.value}'"),
        )
        .returning(RunReplay)
    )
    row = (await session.scalars(stmt)).first()
    return ReplayRecord.from_row(columns_of(row)) if row is not None else None


def _queue_tick(uow: UnitOfWork, replay_id: UUID, *, tick: int, delay_s: float) -> None:
    async def record_unavailable(follow_up: UnitOfWork) -> None:
        await _finish(follow_up, replay_id, ReplayStatus.FAILED, "queue unavailable")

    uow.enqueue(
        REPLAY_JOB,
        {"replayId": str(replay_id), "tick": tick},
        on_unavailable=record_unavailable,
        delay_s=delay_s,
    )


def pace(rate: float) -> tuple[int, float]:
    """(runs per tick, seconds per tick): ticks at least a second apart, never faster than `rate`
    runs per second over any tick (2.5/s runs as 2 a second; 0.25/s as 1 every 4 seconds)."""
    count = max(1, math.floor(rate))
    return count, max(1.0, count / rate)


async def advance_replay(
    uow: UnitOfWork,
    replay_id: UUID,
    tick: int,
    *,
    validate: Validate,
    instances: RunInstances,
    admit: Admit | None = None,
    kek: AESGCM | None = None,
) -> ReplayRecord | None:
    """One tick of a replay; None when there was nothing to do (finished, cancelled, or a
    duplicate delivery of an earlier tick). `kek`: the deployment key, for a tenant that
    encrypts (its runs' inputs are opened to be validated, and the new runs' sealed)."""
    row = await lock_row(uow, replay_id)
    if row is None or row.kind != ReplayKind.REPLAY.value:
        return None

    async def start(batch: Sequence[Run]) -> None:
        cipher = await sealing.cipher_of(uow, kek, row.tenant_id) if batch else None
        await _start_batch(uow, row, batch, validate, instances, admit, cipher)

    return await advance(uow, row, tick, start)


async def kind_of(uow: UnitOfWork, replay_id: UUID) -> ReplayKind | None:
    """Whether a tick is a replay's or a bulk cancel's (a row's kind never changes)."""
    kind = await uow.session.scalar(select(RunReplay.kind).where(RunReplay.id == replay_id))
    return None if kind is None else ReplayKind(kind)


async def lock_row(uow: UnitOfWork, replay_id: UUID) -> RunReplay | None:
    """The row of a bulk action, locked for its tick (a Stop waits for the tick to commit)."""
    return await uow.session.scalar(
        select(RunReplay).where(RunReplay.id == replay_id).with_for_update()
    )


async def advance(
    uow: UnitOfWork,
    row: RunReplay,
    tick: int,
    act: Callable[[Sequence[Run]], Awaitable[None]],
) -> ReplayRecord | None:
    """One tick of the bulk action `row` (locked): `act` on its next batch, move on, and finish
    or queue the next tick; None when it has nothing to do (finished, stopped, or a duplicate
    delivery of an earlier tick)."""
    if row.status != ReplayStatus.RUNNING.value or row.tick != tick:
        return None
    uow.tenant_id = row.tenant_id
    count, seconds = pace(row.rate)
    left = row.total - row.started - row.skipped - row.cancelled
    candidates = await next_matching(uow.session, row, min(count, left))
    await act(candidates)
    done = row.waiting_for_run_id is None and (
        len(candidates) == 0 or row.started + row.skipped + row.cancelled >= row.total
    )
    row.tick += 1
    row.updated_at = func.now()  # SQL, set on flush
    if done:
        row.status = ReplayStatus.DONE.value
        row.finished_at = func.now()
    else:
        _queue_tick(uow, row.id, tick=row.tick, delay_s=seconds)
    uow.nudge("replay.updated", row.id)
    await uow.session.flush()
    await uow.session.refresh(row)
    return ReplayRecord.from_row(columns_of(row))


async def _start_batch(
    uow: UnitOfWork,
    row: RunReplay,
    candidates: Sequence[Run],
    validate: Validate,
    instances: RunInstances,
    admit: Admit | None = None,
    cipher: AESGCM | None = None,
) -> None:
    """Start each candidate in order; stop (and wait) at one whose agent has an active run, or
    when the tenant's startRun rate is spent."""
    row.waiting_for_run_id = None
    for run in candidates:
        try:
            params = validate(run.agent, open_value(cipher, run.input))
        except BadUserInput as exc:
            row.skipped += 1
            row.last_error = f"run {run.id} skipped: {exc.message}"[:1000]
        else:
            if admit is not None and not await admit(row.tenant_id):
                return  # the next tick goes on from this run
            started = await runs.start_run(
                uow,
                agent=run.agent,
                params=params,
                instances=instances,
                retried_from=RunId(run.id),
                options=options_of(run.key, run.on_conflict, run.tags, replay=True),
                cipher=cipher,
            )
            if not started.created:
                row.waiting_for_run_id = started.run.id
                return
            row.started += 1
        row.cursor_created_at, row.cursor_id = run.created_at, run.id


async def _finish(uow: UnitOfWork, replay_id: UUID, status: ReplayStatus, error: str) -> None:
    tenant = await uow.session.scalar(
        update(RunReplay)
        .where(RunReplay.id == replay_id, RunReplay.status == ReplayStatus.RUNNING.value)
        .values(status=status.value, last_error=error[:1000], finished_at=func.now())
        .returning(RunReplay.tenant_id)
    )
    if tenant is not None:
        uow.nudge("replay.updated", replay_id, tenant_id=tenant)


async def fail_replay(uow: UnitOfWork, replay_id: UUID, error: str) -> None:
    """The replay's job ran out of retries: the row says so."""
    await _finish(uow, replay_id, ReplayStatus.FAILED, error)


async def cancel_replay(uow: UnitOfWork, replay_id: UUID) -> ReplayRecord:
    """RUNNING → CANCELLED (its next tick finds nothing to do); idempotent."""
    tenant_id = uow.require_tenant()
    await uow.session.execute(
        update(RunReplay)
        .where(
            RunReplay.id == replay_id,
            RunReplay.tenant_id == tenant_id,
            RunReplay.status == ReplayStatus.RUNNING.value,
        )
        .values(status=ReplayStatus.CANCELLED.value, finished_at=func.now(), updated_at=func.now())
    )
    found = await get_replay(uow, TenantId(tenant_id), replay_id)
    if found is None:
        raise NotFound(f"replay {replay_id} not found")
    uow.nudge("replay.updated", replay_id)
    return found


# Named, never `*`: `.columns()` matches by position, and a migration adds columns at the end.
_COLUMNS = ", ".join(c.name for c in RunReplay.__table__.c)
_REPLAY = prepare(
    text(
        f"SELECT {_COLUMNS} FROM run_replays WHERE id = :replay_id AND tenant_id = :tenant_id"  # noqa: S608
    ).columns(*RunReplay.__table__.c)
)
_REPLAYS = prepare(
    text(
        f"SELECT {_COLUMNS} FROM run_replays WHERE tenant_id = :tenant_id"  # noqa: S608
        " ORDER BY created_at DESC, id LIMIT :first"
    ).columns(*RunReplay.__table__.c)
)


async def get_replay(db: Db, tenant_id: TenantId, replay_id: UUID) -> ReplayRecord | None:
    row = await db.one(_REPLAY, replay_id=replay_id, tenant_id=tenant_id)
    return ReplayRecord.from_row(row) if row is not None else None


async def list_replays(db: Db, tenant_id: TenantId, *, first: int) -> list[ReplayRecord]:
    if not 0 <= first <= MAX_REPLAYS_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_REPLAYS_PAGE}")
    return [
        ReplayRecord.from_row(r) for r in await db.all(_REPLAYS, tenant_id=tenant_id, first=first)
    ]
