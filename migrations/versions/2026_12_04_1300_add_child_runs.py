"""add child runs: a run started by another run's ctx.call / ctx.spawn / ctx.map

A child carries its parent (`parent_id`), the top of its tree (`root_id`; NULL for a top-level
run, which is its own root), its identity under the parent (`parent_step`, "name#occurrence":
unique per parent, so a retried or resumed parent that starts the same child again gets the same
row back, settled or not), its `depth` (a top-level run is 0) and whether it is abandoned when
its parent settles (`abandon_with_parent` false: cancelled with it, the default).

A parent waiting for its children is WAITING with `waiting_for` 'children'. It counts the
children that settled (`children_settled`): the trigger `runs_child_settled` (function
`outlive_child_settled`) bumps it, appends `child_settled` to the parent's timeline and wakes a
parent that waits for its children, in the transaction that settles the child, whichever
statement settles it. A parent parks only while that count is the one it last read, so a child
that settles between the read and the park is never missed. It wakes only for the settle it
needs (`wake_at_children`: the count at which it has something to do, such as a slot for its
next child or the last of its children; or any child that did not succeed), so a parent
waiting for many children is not woken by each of them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHILD_SETTLED = """
CREATE OR REPLACE FUNCTION outlive_child_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A child run settled: its parent counts it (`children_settled`), gets `child_settled` on
    -- its timeline and, when it is WAITING for its children and this settle is one it waits for
    -- (the count reaches `wake_at_children`, or the child did not succeed), goes back to QUEUED
    -- (`resumed {by: "children"}`), not admitted: the settle's caller dispatches the tenant
    -- after its commit. A settled parent, or one asked to stop, is left alone.
    WITH moved AS (
        UPDATE runs p SET children_settled = p.children_settled + 1,
               status = CASE WHEN w.woken THEN 'QUEUED' ELSE p.status END,
               waiting_for = CASE WHEN w.woken THEN NULL ELSE p.waiting_for END,
               wake_at = CASE WHEN w.woken THEN NULL ELSE p.wake_at END,
               wake_at_children = CASE WHEN w.woken THEN NULL ELSE p.wake_at_children END,
               resumes = p.resumes + CAST(w.woken AS int),
               lease_expires_at = CASE WHEN w.woken THEN NULL ELSE p.lease_expires_at END,
               dispatched_at = CASE WHEN w.woken THEN NULL ELSE p.dispatched_at END,
               event_seq = p.event_seq + 1 + CAST(w.woken AS int), updated_at = now()
          FROM (SELECT id, (status = 'WAITING' AND waiting_for = 'children'
                            AND (children_settled + 1 >= coalesce(wake_at_children, 0)
                                 OR NEW.status <> 'SUCCEEDED')) AS woken
                  FROM runs WHERE id = NEW.parent_id AND cancel_requested_at IS NULL
                   AND status IN ('QUEUED', 'RUNNING', 'WAITING') FOR UPDATE) w
         WHERE p.id = w.id
        RETURNING p.id, p.event_seq, w.woken)
    INSERT INTO run_events (run_id, seq, type, data)
    SELECT id, event_seq - CAST(woken AS int), 'child_settled',
           jsonb_build_object('childId', NEW.id, 'status', NEW.status)
      FROM moved
    UNION ALL
    SELECT id, event_seq, 'resumed', '{"by": "children"}'::jsonb FROM moved WHERE woken;
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.add_column("runs", sa.Column("parent_id", sa.Uuid(), nullable=True))
    op.add_column("runs", sa.Column("root_id", sa.Uuid(), nullable=True))
    op.add_column("runs", sa.Column("parent_step", sa.String(), nullable=True))
    op.add_column(
        "runs", sa.Column("depth", sa.SmallInteger(), server_default=sa.text("0"), nullable=False)
    )
    op.add_column(
        "runs",
        sa.Column("children_settled", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column(
        "runs",
        sa.Column(
            "abandon_with_parent", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
    )
    op.add_column("runs", sa.Column("wake_at_children", sa.Integer(), nullable=True))
    op.create_foreign_key(
        "fk_runs_parent_id_runs", "runs", "runs", ["parent_id"], ["id"], ondelete="SET NULL"
    )
    op.create_index(
        "uq_runs_parent_step",
        "runs",
        ["parent_id", "parent_step"],
        unique=True,
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )
    op.create_index(
        "ix_runs_children",
        "runs",
        ["parent_id", "created_at", "id"],
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )
    op.execute(CHILD_SETTLED)
    op.execute(
        "CREATE TRIGGER runs_child_settled AFTER UPDATE OF status ON runs FOR EACH ROW"
        " WHEN (NEW.parent_id IS NOT NULL AND OLD.status IN ('QUEUED', 'RUNNING', 'WAITING')"
        " AND NEW.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))"
        " EXECUTE FUNCTION outlive_child_settled()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER runs_child_settled ON runs")
    op.execute("DROP FUNCTION outlive_child_settled()")
    op.drop_index("ix_runs_children", table_name="runs")
    op.drop_index("uq_runs_parent_step", table_name="runs")
    op.drop_constraint("fk_runs_parent_id_runs", "runs", type_="foreignkey")
    for name in (
        "wake_at_children",
        "abandon_with_parent",
        "children_settled",
        "depth",
        "parent_step",
        "root_id",
        "parent_id",
    ):
        op.drop_column("runs", name)
