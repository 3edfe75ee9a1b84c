"""Which runs a bulk action takes: the filter a replay (`replayRuns`) or a bulk cancel
(`cancelRuns`) stores on its `run_replays` row, and the one selection both read it through.

The filter is the runs list's (statuses, agent, created in [since, before), key, tags, top-level
only), so a person who filtered the list acts on what they see. Only runs created before the
action itself are ever taken: the runs a replay starts, and the runs started while a cancel goes
on, are never part of it, and the walk ends. A bulk cancel also leaves out a RUNNING run already
asked to stop (it is on its way, and counting it again would promise a change nobody makes).
The walk is a keyset cursor over `(created_at, id)`, oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Select, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import ReplayKind, Run, RunReplay, RunStatus
from outlive.errors import BadUserInput

MAX_TAGS = 10  # as many as a run may carry


@dataclass(frozen=True, slots=True)
class RunsFilter:
    """What a bulk action selects; `statuses` already defaulted and checked by its kind."""

    statuses: tuple[RunStatus, ...]
    agent: str | None = None
    since: datetime | None = None
    before: datetime | None = None
    key: str | None = None
    tags: tuple[str, ...] = ()
    top_level: bool = False

    def columns(self) -> dict[str, Any]:
        """The filter as the `run_replays` row stores it."""
        return {
            "statuses": [s.value for s in self.statuses],
            "agent": self.agent,
            "since": self.since,
            "before": self.before,
            "key": self.key,
            "tags": list(self.tags),
            "top_level": self.top_level,
        }

    @classmethod
    def of_row(cls, row: RunReplay) -> RunsFilter:
        return cls(
            statuses=tuple(RunStatus(s) for s in row.statuses),
            agent=row.agent,
            since=row.since,
            before=row.before,
            key=row.key,
            tags=tuple(row.tags),
            top_level=row.top_level,
        )


def runs_filter(
    statuses: Sequence[RunStatus],
    *,
    agent: str | None = None,
    since: datetime | None = None,
    before: datetime | None = None,
    key: str | None = None,
    tags: Sequence[str] | None = None,
    top_level: bool | None = False,
) -> RunsFilter:
    """The filter, its parts de-duplicated; BadUserInput for one that can match nothing sensible."""
    chosen = tuple(dict.fromkeys(tags or ()))
    if len(chosen) > MAX_TAGS:
        raise BadUserInput(f"at most {MAX_TAGS} tags")
    if since is not None and before is not None and since >= before:
        raise BadUserInput("since must be before `before`")
    return RunsFilter(
        statuses=tuple(dict.fromkeys(statuses)),
        agent=agent,
        since=since,
        before=before,
        key=key,
        tags=chosen,
        top_level=bool(top_level),
    )


def matching(tenant_id: UUID, f: RunsFilter, kind: ReplayKind) -> Select[Any]:
    """The tenant's runs that `f` selects for an action of `kind` (not yet bounded in time)."""
    stmt = select(Run).where(
        Run.tenant_id == tenant_id, Run.status.in_([s.value for s in f.statuses])
    )
    if f.agent is not None:
        stmt = stmt.where(Run.agent == f.agent)
    if f.since is not None:
        stmt = stmt.where(Run.created_at >= f.since)
    if f.before is not None:
        stmt = stmt.where(Run.created_at < f.before)
    if f.key is not None:
        stmt = stmt.where(Run.key == f.key)
    if f.tags:
        stmt = stmt.where(Run.tags.contains(list(f.tags)))
    if f.top_level:
        stmt = stmt.where(Run.parent_id.is_(None))
    if kind is ReplayKind.CANCEL:
        stmt = stmt.where(
            or_(Run.status != RunStatus.RUNNING.value, Run.cancel_requested_at.is_(None))
        )
    return stmt


async def count_matching(
    session: AsyncSession, tenant_id: UUID, f: RunsFilter, kind: ReplayKind, *, limit: int
) -> int:
    """How many runs an action made now would take: created before it (`now()`, its own
    creation time in this transaction), at most `limit`."""
    taken = matching(tenant_id, f, kind).where(Run.created_at < func.now())
    limited = taken.with_only_columns(Run.id).limit(limit).subquery()
    return int(await session.scalar(select(func.count()).select_from(limited)) or 0)


async def next_matching(session: AsyncSession, row: RunReplay, count: int) -> list[Run]:
    """The next `count` runs of the action `row`, after its cursor, oldest first."""
    if count <= 0:
        return []
    stmt = matching(row.tenant_id, RunsFilter.of_row(row), ReplayKind(row.kind)).where(
        Run.created_at < row.created_at
    )
    if row.cursor_created_at is not None and row.cursor_id is not None:
        stmt = stmt.where(
            tuple_(Run.created_at, Run.id) > tuple_(row.cursor_created_at, row.cursor_id)
        )
    stmt = stmt.order_by(Run.created_at, Run.id).limit(count)
    return list((await session.scalars(stmt)).all())
