"""roles and members: a role on every member, token and invitation; members can be removed

`users.role`, `api_tokens.role` and `invitations.role` (`ADMIN`, `OPERATOR`, `VIEWER`; contract
§3): a token acts with the lower of its own role and its member's. Every row made before roles
existed is `ADMIN`, as every token could do everything then. `users.removed_at`: a removed
member's tokens are revoked with it, and the row stays for what they did.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06 06:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE_CHECK = "role IN ('ADMIN', 'OPERATOR', 'VIEWER')"
TABLES = ("users", "api_tokens", "invitations")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("role", sa.String(), server_default="ADMIN", nullable=False))
        op.create_check_constraint(op.f(f"ck_{table}_role"), table, ROLE_CHECK)
    op.add_column("users", sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("users", "removed_at")
    for table in TABLES:
        op.drop_constraint(op.f(f"ck_{table}_role"), table, type_="check")
        op.drop_column(table, "role")
