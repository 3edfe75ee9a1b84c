"""Reading a run's place in its tree for many runs at once: its children counted per status
(`Run.childCounts`) and the runs above it, root first (`Run.ancestors`).

Each is one statement for any number of runs (the resolvers' loaders batch a page of them), and
each is tenant-scoped on every row it reads: a run of another tenant is neither counted nor
walked through. A tree is at most `MAX_DEPTH` levels below its root, so the walk up stops there
whatever the rows say. A parent deleted by retention (`parent_id` set NULL) ends the walk: the
path then starts at the oldest run still kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ARRAY, Uuid, bindparam, column, text

from outlive.db.models import RunStatus
from outlive.db.raw import prepare
from outlive.db.tx import Db
from outlive.ids import RunId, TenantId
from outlive.services.runs.cascade import MAX_DEPTH
from outlive.services.runs.records import RunRecord, to_record

# Each parent's children, counted per status (the index on (parent_id, created_at, id)).
CHILD_COUNTS = prepare(
    text(
        "SELECT parent_id, status, count(*) AS n FROM runs"
        " WHERE parent_id = ANY(:run_ids) AND tenant_id = :tenant_id"
        " GROUP BY parent_id, status"
    )
    .bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
    .columns(column("parent_id"), column("status"), column("n"))
)

# Each run's ancestors: its parent at level 1, the parent's parent at 2, …, at most MAX_DEPTH.
ANCESTORS = prepare(
    text(
        """WITH RECURSIVE up(start_id, id, level) AS (
            SELECT r.id, r.parent_id, 1 FROM runs r
             WHERE r.id = ANY(:run_ids) AND r.tenant_id = :tenant_id AND r.parent_id IS NOT NULL
            UNION ALL
            SELECT up.start_id, p.parent_id, up.level + 1
              FROM up JOIN runs p ON p.id = up.id AND p.tenant_id = :tenant_id
             WHERE p.parent_id IS NOT NULL AND up.level < :max_depth)
        SELECT up.start_id, up.level, r.* FROM up
          JOIN runs r ON r.id = up.id AND r.tenant_id = :tenant_id
         ORDER BY up.start_id, up.level DESC"""
    ).bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
)

_ORDER = {status: i for i, status in enumerate(RunStatus)}


@dataclass(frozen=True, slots=True)
class StatusCount:
    status: RunStatus
    count: int


async def count_children_of_runs(
    db: Db, tenant_id: TenantId, run_ids: Sequence[RunId]
) -> dict[RunId, list[StatusCount]]:
    """Each run's children per status, in `RunStatus` order, statuses with none left out (one
    statement)."""
    found: dict[RunId, list[StatusCount]] = {run_id: [] for run_id in run_ids}
    rows = await db.all(CHILD_COUNTS, run_ids=list(found), tenant_id=tenant_id)
    for row in rows:
        found[RunId(row["parent_id"])].append(StatusCount(RunStatus(row["status"]), row["n"]))
    for counts in found.values():
        counts.sort(key=lambda c: _ORDER[c.status])
    return found


async def list_ancestors_of_runs(
    db: Db, tenant_id: TenantId, run_ids: Sequence[RunId]
) -> dict[RunId, list[RunRecord]]:
    """Each run's ancestors, root first, its parent last; [] for a top-level run (one
    statement)."""
    found: dict[RunId, list[RunRecord]] = {run_id: [] for run_id in run_ids}
    rows = await db.all(ANCESTORS, run_ids=list(found), tenant_id=tenant_id, max_depth=MAX_DEPTH)
    for row in rows:
        found[RunId(row["start_id"])].append(to_record(row))
    return found
