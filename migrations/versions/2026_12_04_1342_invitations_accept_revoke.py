"""invitations can be accepted and revoked, and expire by a date of their own

`acceptInvitation(code)` (contract §4.1) marks an invitation ACCEPTED, with the user it made
(`accepted_by`) and when (`accepted_at`); `revokeInvitation` marks it REVOKED. An invitation
expires at `expires_at` (7 days after it was made; a resend starts the 7 days again), SENT ones
too: before, only PENDING and FAILED rows expired, so a SENT link worked for ever. The expiry
index follows: a partial index on `expires_at` over the rows that can still expire.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEW = "status IN ('PENDING', 'SENT', 'FAILED', 'EXPIRED', 'ACCEPTED', 'REVOKED')"
_OLD = "status IN ('PENDING', 'SENT', 'FAILED', 'EXPIRED')"


def upgrade() -> None:
    op.drop_constraint(op.f("ck_invitations_status"), "invitations", type_="check")
    op.create_check_constraint(op.f("ck_invitations_status"), "invitations", sa.text(_NEW))
    op.add_column(
        "invitations",
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now() + interval '7 days'"),
            nullable=False,
        ),
    )
    op.execute("UPDATE invitations SET expires_at = created_at + interval '7 days'")
    op.add_column("invitations", sa.Column("accepted_at", sa.DateTime(timezone=True)))
    op.add_column("invitations", sa.Column("accepted_by", sa.Uuid(), nullable=True))
    op.create_foreign_key(
        op.f("fk_invitations_accepted_by_users"),
        "invitations",
        "users",
        ["accepted_by"],
        ["id"],
        ondelete="SET NULL",
    )
    op.drop_index(
        "ix_invitations_expirable_created_at",
        table_name="invitations",
        postgresql_where=sa.text("status IN ('PENDING', 'FAILED')"),
    )
    op.create_index(
        "ix_invitations_expirable",
        "invitations",
        ["expires_at"],
        postgresql_where=sa.text("status IN ('PENDING', 'SENT', 'FAILED')"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_invitations_expirable",
        table_name="invitations",
        postgresql_where=sa.text("status IN ('PENDING', 'SENT', 'FAILED')"),
    )
    op.create_index(
        "ix_invitations_expirable_created_at",
        "invitations",
        ["created_at"],
        postgresql_where=sa.text("status IN ('PENDING', 'FAILED')"),
    )
    op.drop_constraint(op.f("fk_invitations_accepted_by_users"), "invitations", type_="foreignkey")
    op.drop_column("invitations", "accepted_by")
    op.drop_column("invitations", "accepted_at")
    op.drop_column("invitations", "expires_at")
    op.execute("UPDATE invitations SET status = 'EXPIRED' WHERE status IN ('ACCEPTED', 'REVOKED')")
    op.drop_constraint(op.f("ck_invitations_status"), "invitations", type_="check")
    op.create_check_constraint(op.f("ck_invitations_status"), "invitations", sa.text(_OLD))
