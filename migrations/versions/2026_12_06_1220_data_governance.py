"""data governance: retention per tenant, erasures, kept usage, blobs (issue 46)

`tenants.retention_days` (NULL: `OUTLIVE_RETENTION_DAYS`); `usage_kept_runs` and
`usage_kept_tokens` (what deleted runs counted towards usage, so totals survive retention and
erasure); `erasures` (the record of each `eraseSubject`, never the erased content); `blobs`,
`blob_parts` (large payloads stored once per tenant and sha256, in page-sized parts) and
`blob_refs` (the runs that hold each); indexes on `run_signals.run_id`,
`webhook_deliveries.run_id` and `api_tokens.run_id` (what deleting a run looks up by run).

Revision ID: 0046
Revises: 0044
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0046"
down_revision: str | None = "0044"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tenant() -> sa.Column:
    return sa.Column("tenant_id", sa.Uuid(), nullable=False)


def _tenant_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id"],
        ["tenants.id"],
        name=op.f(f"fk_{table}_tenant_id_tenants"),
        ondelete="CASCADE",
    )


def upgrade() -> None:
    op.add_column("tenants", sa.Column("retention_days", sa.Integer(), nullable=True))
    op.add_column("tenants", sa.Column("data_key", sa.LargeBinary(), nullable=True))
    op.create_check_constraint(
        op.f("ck_tenants_retention_days"), "tenants", "retention_days BETWEEN 1 AND 3650"
    )
    op.create_table(
        "usage_kept_runs",
        _tenant(),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        _tenant_fk("usage_kept_runs"),
        sa.PrimaryKeyConstraint(
            "tenant_id", "day", "agent", "status", name=op.f("pk_usage_kept_runs")
        ),
    )
    op.create_table(
        "usage_kept_tokens",
        _tenant(),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(), nullable=True),
        sa.Column("unpriced", sa.BigInteger(), nullable=False),
        _tenant_fk("usage_kept_tokens"),
        sa.PrimaryKeyConstraint(
            "tenant_id", "day", "agent", "model", name=op.f("pk_usage_kept_tokens")
        ),
    )
    _erasures()
    _blobs()
    # What an erasure (and the cascade of a deleted run) looks up by run.
    op.create_index("ix_run_signals_run", "run_signals", ["run_id"], unique=False)
    op.create_index(
        "ix_api_tokens_run_id",
        "api_tokens",
        ["run_id"],
        unique=False,
        postgresql_where=sa.text("run_id IS NOT NULL"),
    )
    op.create_index(
        "ix_webhook_deliveries_run",
        "webhook_deliveries",
        ["run_id"],
        unique=False,
        postgresql_where=sa.text("run_id IS NOT NULL"),
    )


def _erasures() -> None:
    zero = sa.text("0")
    op.create_table(
        "erasures",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        _tenant(),
        sa.Column("tag", sa.String(), nullable=False),
        sa.Column("by", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("runs", sa.Integer(), server_default=zero, nullable=False),
        sa.Column("steps", sa.Integer(), server_default=zero, nullable=False),
        sa.Column("events", sa.Integer(), server_default=zero, nullable=False),
        sa.Column("signals", sa.Integer(), server_default=zero, nullable=False),
        sa.Column("deliveries", sa.Integer(), server_default=zero, nullable=False),
        sa.Column("blobs", sa.Integer(), server_default=zero, nullable=False),
        _tenant_fk("erasures"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_erasures")),
    )
    op.create_index(
        "ix_erasures_tenant_newest", "erasures", ["tenant_id", sa.text("at DESC")], unique=False
    )


def _blobs() -> None:
    op.create_table(
        "blobs",
        _tenant(),
        sa.Column("sha256", sa.LargeBinary(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        _tenant_fk("blobs"),
        sa.PrimaryKeyConstraint("tenant_id", "sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "blob_parts",
        _tenant(),
        sa.Column("sha256", sa.LargeBinary(), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "sha256"],
            ["blobs.tenant_id", "blobs.sha256"],
            name=op.f("fk_blob_parts_tenant_id_blobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "sha256", "part", name=op.f("pk_blob_parts")),
    )
    # A part fills a page and stays in it: never TOASTed (2 KB chunks, an index of their own),
    # never compressed (payloads mostly are already; compressing them again costs CPU).
    op.execute("ALTER TABLE blob_parts SET (toast_tuple_target = 8160)")
    op.execute("ALTER TABLE blob_parts ALTER COLUMN data SET STORAGE EXTERNAL")
    op.create_table(
        "blob_refs",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("sha256", sa.LargeBinary(), nullable=False),
        _tenant(),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_blob_refs_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "sha256", name=op.f("pk_blob_refs")),
    )
    op.create_index("ix_blob_refs_blob", "blob_refs", ["tenant_id", "sha256"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_run", table_name="webhook_deliveries")
    op.drop_index("ix_run_signals_run", table_name="run_signals")
    op.drop_index("ix_api_tokens_run_id", table_name="api_tokens")
    for table in (
        "blob_refs",
        "blob_parts",
        "blobs",
        "erasures",
        "usage_kept_tokens",
        "usage_kept_runs",
    ):
        op.drop_table(table)
    op.drop_constraint(op.f("ck_tenants_retention_days"), "tenants", type_="check")
    op.drop_column("tenants", "data_key")
    op.drop_column("tenants", "retention_days")
