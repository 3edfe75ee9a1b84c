"""Cancelling a run's descendants: after its cancel (or its settle) committed, a level of the
tree per transaction, so that no lock is ever taken top-down while a child's settle takes its
parent's bottom-up (see `services.runs.children`)."""

# ruff: noqa: S608  (SQL assembled from this module's constants only; values are bound)
from __future__ import annotations

from sqlalchemy import ARRAY, Uuid, bindparam, text

from outlive.db.raw import prepare
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services import webhooks
from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.queries import ACTIVE
from outlive.services.webhooks.queries import SETTLED_DELIVERIES_CTE

MAX_DEPTH = 8  # a top-level run is depth 0; its children 1, … at most 8

_IDLE = "status IN ('QUEUED', 'WAITING')"
# One level of a cascade: the live children of `parents` (not abandoned) cancelled.
CANCEL_CHILDREN = prepare(
    text(
        f"""WITH moved AS (
            UPDATE runs SET status = CASE WHEN {_IDLE} THEN 'CANCELLED' ELSE status END,
                finished_at = CASE WHEN {_IDLE} THEN now() ELSE finished_at END,
                cancel_requested_at = coalesce(cancel_requested_at, now()),
                event_seq = event_seq + 1, updated_at = now()
             WHERE parent_id = ANY(:parents) AND {ACTIVE} AND NOT abandon_with_parent
               AND ({_IDLE} OR cancel_requested_at IS NULL)
            RETURNING *),
        appended AS (
            INSERT INTO run_events (run_id, seq, type, data)
            SELECT id, event_seq,
                   CASE WHEN status = 'CANCELLED' THEN 'cancelled' ELSE 'cancel_requested' END,
                   jsonb_build_object('by', 'parent', 'parentId', parent_id) FROM moved),
        {SETTLED_DELIVERIES_CTE},
        below AS (
            SELECT id FROM runs WHERE parent_id = ANY(:parents) AND NOT abandon_with_parent)
        SELECT 'moved' AS kind, id, tenant_id, status FROM moved
        UNION ALL SELECT 'delivery', id, NULL, NULL FROM delivered
        UNION ALL SELECT 'below', id, NULL, NULL FROM below"""
    ).bindparams(bindparam("parents", type_=ARRAY(Uuid())))
)


async def cancel_descendants(sessions: Sessions, tenant_id: TenantId, run_id: RunId) -> int:
    """Cancel the live descendants of `run_id` (not abandoned), a level per transaction, after
    its own cancel or settle committed. Returns how many were moved."""
    parents, moved = [run_id], 0
    for _ in range(MAX_DEPTH):
        if not parents:
            break
        async with sessions.unit(tenant_id) as uow:
            rows = await uow.all(CANCEL_CHILDREN, parents=parents)
            deliveries = [r["id"] for r in rows if r["kind"] == "delivery"]
            for r in rows:
                if r["kind"] == "moved":
                    uow.nudge("run.updated", r["id"], tenant_id=tenant_id)
                    uow.nudge("run.event", r["id"], tenant_id=tenant_id)
            if deliveries:
                webhooks.announce_deliveries(uow, tenant_id, deliveries)
            if any(r["kind"] == "moved" for r in rows):
                dispatch_after_commit(uow, tenant_id)
        moved += sum(1 for r in rows if r["kind"] == "moved")
        parents = [RunId(r["id"]) for r in rows if r["kind"] == "below"]
    return moved
