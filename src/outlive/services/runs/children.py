"""Child runs: started by a run (`ctx.call` / `ctx.spawn` / `ctx.map`), awaited while it waits.

A child is identified by (parent, `parent_step`): "name#occurrence", or "name#occurrence[i]" for
the i-th child of a `map`. `uq_runs_parent_step` makes that identity unique whatever the child's
status, so a retried, resumed or crashed parent that asks for the same child again gets the same
row back and never starts it twice. A child has a key of its own (`child:<parent>:<step>`)
unless the call gives one, so it never collides with its agent's top-level runs, and it is
written waiting for a slot: children count against their tenant's cap like any run, and the
dispatch after the commit admits them.

A parent that waits for its children parks WAITING (`waiting_for` 'children': no worker, no
slot) until its count of settled children (`children_settled`) reaches the count at which it has
something to do: a slot for its next child, or the last of its children (`PARK_FOR_CHILDREN`,
only while the count is below that). The trigger `outlive_child_settled` bumps the count,
appends `child_settled` and wakes a parent at its count (or at a child that did not succeed) in
the transaction that settles the child, so a settle between the parent's read and its park is
never missed, and a parent waiting for many children is not woken by each. The trigger leaves a
parent whose cancel was requested alone: it will not park again, and a cascade never waits on a
parent's row lock while it holds its children's.

Cancelling (`cancel_descendants`) goes down the tree a level per transaction, each level's live
children settled CANCELLED at once (QUEUED, WAITING) or asked to stop (RUNNING): the level above
is already cancelled, so no lock is ever taken bottom-up and top-down at once. Children started
with `abandon` are left alone, and so is their subtree. A child whose parent is cancelled or
settled is never claimed (the claim's predicate), so none starts after the cancel committed.
"""

# ruff: noqa: S608  (SQL assembled from this module's constants only; values are bound)
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, String, bindparam, column, text

from outlive.db.raw import prepare
from outlive.db.tx import Db, Unit
from outlive.ids import RunId, TenantId
from outlive.services import blobs
from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.cascade import MAX_DEPTH
from outlive.services.runs.moves import move_run
from outlive.services.runs.queries import ACTIVE, RUN_COLUMNS, move
from outlive.services.runs.reads import decode_cursor, encode_cursor
from outlive.services.runs.records import RunPage, RunRecord, to_record
from outlive.services.runs.timeline import INSERT_EVENTS, bump

MAX_CHILDREN = 10_000  # children one parent may start
CHILDREN = "children"  # `waiting_for` of a parent waiting for its children

# Start children of a parent whose attempt still holds it: each spec (step, agent, input, key,
# abandon) inserted unless that step already has its child, and `child_started` on the parent's
# timeline for each one inserted. Written waiting for a slot (`dispatched_at` NULL); a
# microsecond apart in input order, so that `children` (oldest first) and the dispatch (oldest
# first) follow the order they were asked for in.
SPAWN = prepare(
    text(
        f"""WITH parent AS (
            SELECT id, tenant_id, coalesce(root_id, id) AS root, depth, cancel_requested_at
              FROM runs WHERE id = :parent_id AND status = 'RUNNING' AND attempt = :attempt
               FOR UPDATE),
        spec AS (
            SELECT * FROM jsonb_to_recordset(CAST(:children AS jsonb))
                AS s(step text, agent text, input jsonb, key text, abandon boolean, ord int)),
        inserted AS (
            INSERT INTO runs (tenant_id, agent, input, key, parent_id, root_id, parent_step,
                              depth, abandon_with_parent, dispatched_at, created_at)
            SELECT p.tenant_id, s.agent, s.input, s.key, p.id, p.root, s.step, p.depth + 1,
                   s.abandon, NULL, now() + make_interval(secs => s.ord / 1000000.0)
              FROM parent p CROSS JOIN spec s WHERE p.cancel_requested_at IS NULL
             ORDER BY s.ord
            ON CONFLICT (parent_id, parent_step) WHERE parent_id IS NOT NULL DO NOTHING
            RETURNING id, parent_step),
        numbered AS (
            SELECT i.id, i.parent_step, row_number() OVER (ORDER BY s.ord) AS n
              FROM inserted i JOIN spec s ON s.step = i.parent_step),
        moved AS (
            UPDATE runs SET {bump("(SELECT count(*) FROM inserted)")},
                   updated_at = now()
              FROM parent WHERE runs.id = parent.id AND EXISTS (SELECT 1 FROM inserted)
            RETURNING runs.id, runs.event_seq),
        appended AS (
            {INSERT_EVENTS}
            SELECT m.id, m.event_seq - (SELECT count(*) FROM inserted) + n.n, 'child_started',
                   jsonb_build_object('childId', n.id, 'name', n.parent_step,
                                      'attempt', CAST(:attempt AS int))
              FROM moved m CROSS JOIN numbered n)
        SELECT (SELECT count(*) FROM parent) AS held,
               (SELECT bool_or(cancel_requested_at IS NOT NULL) FROM parent) AS cancelling,
               (SELECT count(*) FROM inserted) AS started,
               (SELECT array_agg(id) FROM inserted) AS ids"""
    )
)
COUNT_CHILDREN = prepare(
    text("SELECT count(*) AS n FROM runs WHERE parent_id = :parent_id").columns(column("n"))
)
# The parent's count of settled children and its children of `steps`, read in one snapshot.
STATE = prepare(
    text(
        """SELECT p.children_settled AS seen, p.status AS parent_status, p.attempt AS held_by,
                  p.cancel_requested_at IS NOT NULL AS cancelling,
                  c.id, c.parent_step, c.status, c.output, c.error,
                  extract(epoch FROM now() - c.created_at) AS age_s
             FROM runs p LEFT JOIN runs c ON c.parent_id = p.id AND c.parent_step = ANY(:steps)
            WHERE p.id = :parent_id"""
    ).bindparams(bindparam("steps", type_=ARRAY(String())))
)
# RUNNING → WAITING for its children until `children_settled` reaches `:target` (or a child
# fails), only while it has not reached it yet: a settle between the parent's read and its park
# that it waits for makes the park fail, and the parent reads again.
PARK_FOR_CHILDREN = move(
    "status = 'WAITING', waiting_for = 'children', wake_at = CAST(:until AS timestamptz),"
    " wake_at_children = :target, lease_expires_at = NULL",
    "status = 'RUNNING' AND attempt = :attempt AND cancel_requested_at IS NULL"
    " AND children_settled < :target",
    event_type="'waiting'",
    event_data="jsonb_build_object('for', 'children', 'until', wake_at)",
)


def _children_page(status_filter: str) -> Any:
    return prepare(
        text(
            "SELECT * FROM runs WHERE parent_id = :parent_id AND tenant_id = :tenant_id"
            " AND (CAST(:after_at AS timestamptz) IS NULL OR (created_at, id) >"
            " (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid)))"
            f"{status_filter} ORDER BY created_at, id LIMIT :limit"
        ).columns(*RUN_COLUMNS)
    )


CHILDREN_PAGE = _children_page("")
CHILDREN_PAGE_OF = _children_page(" AND status = ANY(CAST(:statuses AS text[]))")


ABANDON_CHILDREN = prepare(
    text(
        "UPDATE runs SET abandon_with_parent = true WHERE parent_id = :parent_id"
        f" AND tenant_id = :tenant_id AND {ACTIVE} AND NOT abandon_with_parent"
    )
)


@dataclass(frozen=True, slots=True)
class ChildSpec:
    step: str  # its identity under the parent: "name#occurrence" (a map's: "…[i]")
    agent: str
    input: dict[str, Any]
    key: str | None = None  # None: a key of its own, `child:<parent>:<step>`
    abandon: bool = False  # left running when the parent settles or is cancelled


@dataclass(frozen=True, slots=True)
class ChildState:
    id: RunId
    step: str
    status: str
    output: Any
    error: str | None
    age_s: float  # since it was started, on PostgreSQL's clock


@dataclass(frozen=True, slots=True)
class Children:
    """What a parent read of its children in one snapshot."""

    seen: int  # the parent's `children_settled` then
    held: bool  # the parent's attempt still held it
    cancelling: bool
    by_step: dict[str, ChildState]


async def spawn(
    uow: Unit, *, parent: RunRecord, attempt: int, children: Sequence[ChildSpec]
) -> tuple[bool, bool]:
    """Start the children of `children` that their steps do not have yet; (held, cancelling):
    whether `attempt` still holds the parent, and whether a cancel was requested (nothing is
    started then). Refuses past `MAX_DEPTH` or `MAX_CHILDREN` (ValueError: the parent fails)."""
    if parent.depth + 1 > MAX_DEPTH:
        raise ValueError(f"a child run is at most {MAX_DEPTH} levels below its root")
    row = await uow.one(COUNT_CHILDREN, parent_id=parent.id)
    if row is not None and row["n"] + len(children) > MAX_CHILDREN:
        raise ValueError(f"a run starts at most {MAX_CHILDREN} children")
    if any(c.key is not None and not 1 <= len(c.key) <= 200 for c in children):
        raise ValueError("a child's key is 1 to 200 characters")
    specs = [
        {
            "step": c.step,
            "agent": c.agent,
            "input": c.input,
            "key": c.key if c.key is not None else f"child:{parent.id}:{c.step}",
            "abandon": c.abandon,
            "ord": i,
        }
        for i, c in enumerate(children)
    ]
    done = await uow.one(SPAWN, parent_id=parent.id, attempt=attempt, children=json.dumps(specs))
    assert done is not None  # noqa: S101 (an aggregate row, always)
    if done["started"]:
        uow.nudge("run.updated", parent.id, tenant_id=parent.tenant_id)
        uow.nudge("run.event", parent.id, tenant_id=parent.tenant_id)
        for child_id in done["ids"]:
            uow.nudge("run.created", child_id, tenant_id=parent.tenant_id)
        dispatch_after_commit(uow, parent.tenant_id)
    return bool(done["held"]), bool(done["cancelling"])


async def read_children(
    uow: Unit, parent_id: RunId, steps: Sequence[str], *, attempt: int
) -> Children:
    """The parent's children of `steps` and its count of settled children, in one snapshot;
    `held`: `attempt` still executes the parent."""
    rows = await uow.all(STATE, parent_id=parent_id, steps=list(steps))
    first = rows[0] if rows else None
    by_step = {
        r["parent_step"]: ChildState(
            RunId(r["id"]),
            r["parent_step"],
            r["status"],
            await blobs.resolve_held(uow, r["id"], r["output"]),  # a large one, stored apart
            r["error"],
            r["age_s"],
        )
        for r in rows
        if r["id"] is not None
    }
    return Children(
        seen=first["seen"] if first else -1,
        held=first is not None
        and first["parent_status"] == "RUNNING"
        and first["held_by"] == attempt,
        cancelling=bool(first and first["cancelling"]),
        by_step=by_step,
    )


async def park_for_children(
    uow: Unit, run: RunRecord, *, attempt: int, target: int, until: Any = None
) -> RunRecord | None:
    """Park the parent WAITING for its children until its count of settled children reaches
    `target` (or one fails); None when it reached it since the parent read them (or the attempt
    lost the run): read again."""
    parked = await move_run(
        uow, PARK_FOR_CHILDREN, run_id=run.id, attempt=attempt, target=target, until=until
    )
    if parked is not None:
        dispatch_after_commit(uow, run.tenant_id)  # its slot under the cap is free now
    return parked


async def abandon_children(uow: Unit, parent_id: RunId) -> None:
    """Leave the parent's live children running when it settles or is cancelled."""
    await uow.execute(ABANDON_CHILDREN, parent_id=parent_id, tenant_id=uow.require_tenant())


async def read_children_page(
    db: Db,
    tenant_id: TenantId,
    parent_id: RunId,
    *,
    first: int,
    after: str | None,
    statuses: Sequence[str] | None,
) -> RunPage:
    """A parent's children, oldest first, keyset-paginated like `runs`."""
    after_at, after_id = decode_cursor(after) if after else (None, None)
    params: dict[str, Any] = {
        "parent_id": parent_id,
        "tenant_id": tenant_id,
        "after_at": after_at,
        "after_id": after_id,
        "limit": first + 1,
    }
    statement = CHILDREN_PAGE
    if statuses:
        statement, params["statuses"] = CHILDREN_PAGE_OF, list(statuses)
    rows = await db.all(statement, **params)
    runs = [to_record(r) for r in rows[:first]]
    return RunPage(
        runs=runs,
        cursors=[encode_cursor(r) for r in runs],
        has_next_page=len(rows) > first,
    )
