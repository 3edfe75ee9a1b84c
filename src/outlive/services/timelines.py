"""Run timelines read for many runs at once (one statement per page shape, however many runs).

`services.runs.list_events` reads one run's timeline; a page of runs that each ask for their
events reads them all here, through a per-request loader (`resolvers.loaders`), instead of one
query per run.
"""

from __future__ import annotations

from collections.abc import Sequence

from outlive.db.tx import Db
from outlive.ids import RunId
from outlive.services.runs import EventRecord, check_events_page
from outlive.services.runs.queries import EVENTS_OF_RUNS
from outlive.services.runs.records import to_event

__all__ = ["check_events_page", "list_events_of_runs"]


async def list_events_of_runs(
    db: Db, run_ids: Sequence[RunId], *, after: int, first: int
) -> dict[RunId, list[EventRecord]]:
    """Each run's events with seq > `after`, ascending, at most `first` each (one statement).
    The runs were read tenant-scoped by the caller; a run id nobody could read has no events."""
    check_events_page(first)
    found: dict[RunId, list[EventRecord]] = {run_id: [] for run_id in run_ids}
    rows = await db.all(
        EVENTS_OF_RUNS, run_ids=list(dict.fromkeys(run_ids)), after=after, first=first
    )
    for row in rows:
        found[RunId(row["run_id"])].append(to_event(row))
    return found
