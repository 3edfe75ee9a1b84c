"""the planner knows how many runs carry a tenant's tag: statistics on the tags index's expression

`ix_runs_tenant_tags` is a partial index (`tags <> '{}'`), and PostgreSQL ignores the statistics
of a partial index's expression, so it had none for `outlive_tenant_tags(tenant_id, tags)`: every
`@>` on it was estimated at the default 0.5% (50 of a tenant's 10,050 runs where the erasure's
tag matched 10,000). Statistics on the expression (PostgreSQL 14+) give its most common elements,
so a tag's runs are counted as they are. The index is not rebuilt: neither it nor the function
changes.

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-06 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0048"
down_revision: str | None = "0047"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "CREATE STATISTICS st_runs_tenant_tags ON (outlive_tenant_tags(tenant_id, tags)) FROM runs"
    )
    op.execute("ANALYZE runs")  # seconds on a million runs; reads and writes go on meanwhile


def downgrade() -> None:
    op.execute("DROP STATISTICS st_runs_tenant_tags")
