"""add run read tokens: an API token scoped to one run, that dies with the token that made it

`createRunReadToken` makes a token a tenant hands to its end user's browser: it reads one run
(`api_tokens.run_id`) and nothing else. `parent_id` names the tenant token that made it: the
lookup refuses a read token whose parent is revoked or expired, and a revocation announced for
the parent closes the read token's sockets too. Both cascade: a deleted run or parent token
takes its read tokens with it. The partial index finds a parent's read tokens.

Revision ID: 0018
Revises: 0016
Create Date: 2026-12-04 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("run_id", sa.Uuid(), nullable=True))
    op.add_column("api_tokens", sa.Column("parent_id", sa.Uuid(), nullable=True))
    op.create_foreign_key(
        op.f("fk_api_tokens_run_id_runs"),
        "api_tokens",
        "runs",
        ["run_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        op.f("fk_api_tokens_parent_id_api_tokens"),
        "api_tokens",
        "api_tokens",
        ["parent_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_index(
        op.f("ix_api_tokens_parent_id"),
        "api_tokens",
        ["parent_id"],
        postgresql_where=sa.text("parent_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_api_tokens_parent_id"), table_name="api_tokens")
    op.drop_constraint(op.f("fk_api_tokens_parent_id_api_tokens"), "api_tokens", type_="foreignkey")
    op.drop_constraint(op.f("fk_api_tokens_run_id_runs"), "api_tokens", type_="foreignkey")
    op.drop_column("api_tokens", "parent_id")
    op.drop_column("api_tokens", "run_id")
