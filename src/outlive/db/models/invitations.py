"""Invitations: a row per invite, sent by the `email.invitation.v1` job."""

import enum
from datetime import datetime
from uuid import UUID

from sqlalchemy import CheckConstraint, ForeignKey, Index, LargeBinary, String, text
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk
from outlive.db.models.runs import RELAY_FIRST_LOOK
from outlive.db.models.tenants import ROLE_CHECK


class InvitationStatus(enum.StrEnum):
    PENDING = "PENDING"
    SENT = "SENT"
    FAILED = "FAILED"
    EXPIRED = "EXPIRED"
    ACCEPTED = "ACCEPTED"  # its code made a user and a token (acceptInvitation)
    REVOKED = "REVOKED"  # revoked before it was accepted: its code no longer works


class Invitation(Base):
    __tablename__ = "invitations"
    __table_args__ = (
        CheckConstraint(
            "status IN ('PENDING', 'SENT', 'FAILED', 'EXPIRED', 'ACCEPTED', 'REVOKED')",
            name="status",
        ),
        CheckConstraint(ROLE_CHECK, name="role"),
        Index("ix_invitations_tenant_newest", "tenant_id", text("created_at DESC")),
        Index(
            "ix_invitations_expirable",
            "expires_at",
            postgresql_where=text("status IN ('PENDING', 'SENT', 'FAILED')"),
        ),
        Index(
            "ix_invitations_pending",
            "tenant_id",
            "created_at",
            "id",
            postgresql_where=text("status = 'PENDING'"),
        ),
        Index(
            "ix_invitations_relay",
            "relay_after",
            postgresql_where=text("status = 'PENDING' AND dispatched_at IS NOT NULL"),
        ),
        Index(
            "ix_invitations_waiting",
            "tenant_id",
            "created_at",
            postgresql_where=text("status = 'PENDING' AND dispatched_at IS NULL"),
        ),
        # One PENDING invitation per (tenant, email): inviting again hands it back.
        Index(
            "uq_invitations_pending_email",
            "tenant_id",
            "email",
            unique=True,
            postgresql_where=text("status = 'PENDING'"),
        ),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    invited_by: Mapped[UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    email: Mapped[str]
    token_hash: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    status: Mapped[str] = mapped_column(String, server_default=InvitationStatus.PENDING.value)
    attempts: Mapped[int] = mapped_column(server_default=text("0"))
    last_error: Mapped[str | None]
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    sent_at: Mapped[datetime | None]
    dispatched_at: Mapped[datetime | None]  # admitted under the tenant's jobs cap
    relay_after: Mapped[datetime] = mapped_column(server_default=text(RELAY_FIRST_LOOK))
    # 7 days after it was made or last resent; its code works until then (acceptInvitation).
    expires_at: Mapped[datetime] = mapped_column(server_default=text("now() + interval '7 days'"))
    accepted_at: Mapped[datetime | None]
    accepted_by: Mapped[UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # The role the invitee gets (`inviteMember(role:)`); those made before roles were ADMIN.
    role: Mapped[str] = mapped_column(String, server_default="ADMIN")
