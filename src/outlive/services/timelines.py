"""Run timelines read for many runs at once (one statement per page shape, however many runs).

`services.runs.list_events` reads one run's timeline; a page of runs that each ask for their
events reads them all here, through a per-request loader (`resolvers.loaders`), instead of one
query per run.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ARRAY, Uuid, bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import RunEvent
from outlive.errors import BadUserInput
from outlive.ids import RunId
from outlive.services.runs import MAX_EVENTS_PAGE, EventRecord

_EVENTS_OF_RUNS = (
    text(
        "SELECT e.run_id, e.seq, e.type, e.data, e.at"
        " FROM unnest(:run_ids) AS r(id)"
        " CROSS JOIN LATERAL (SELECT run_id, seq, type, data, at FROM run_events"
        "   WHERE run_id = r.id AND seq > :after ORDER BY seq LIMIT :first) e"
    )
    .bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
    .columns(RunEvent.run_id, RunEvent.seq, RunEvent.type, RunEvent.data, RunEvent.at)
)


def check_events_page(first: int) -> None:
    if not 0 <= first <= MAX_EVENTS_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_EVENTS_PAGE}")


async def list_events_of_runs(
    session: AsyncSession, run_ids: Sequence[RunId], *, after: int, first: int
) -> dict[RunId, list[EventRecord]]:
    """Each run's events with seq > `after`, ascending, at most `first` each (one statement).
    The runs were read tenant-scoped by the caller; a run id nobody could read has no events."""
    check_events_page(first)
    found: dict[RunId, list[EventRecord]] = {run_id: [] for run_id in run_ids}
    rows = await session.execute(
        _EVENTS_OF_RUNS, {"run_ids": list(dict.fromkeys(run_ids)), "after": after, "first": first}
    )
    for run_id, seq, type_, data, at in rows:
        found[RunId(run_id)].append(EventRecord(seq=seq, type=type_, data=data, at=at))
    return found
