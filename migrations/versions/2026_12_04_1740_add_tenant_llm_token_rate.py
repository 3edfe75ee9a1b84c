"""a tenant's own token rate of the `llm` named limit

`tenants.llm_token_rate` ("N/S": N model tokens, input plus output, per S seconds; NULL: the
tenant's share of `OUTLIVE_LIMIT_LLM_TOKENS`), set with `outlive tenant set-limits
--llm-token-rate`, as `llm_rate` is for requests.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04 17:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("llm_token_rate", sa.String(), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "llm_token_rate")
