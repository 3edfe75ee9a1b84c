"""Invitations (contract §4)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.db.models import InvitationStatus as DbInvitationStatus
from outlive.schema.members import Role
from outlive.schema.tenants import Viewer
from outlive.services.invitations import CodeCheck, InvitationRecord

InvitationStatus = strawberry.enum(DbInvitationStatus, name="InvitationStatus")


@strawberry.type
class Invitation:
    id: strawberry.ID
    email: str
    status: InvitationStatus  # type: ignore[valid-type]
    created_at: datetime
    sent_at: datetime | None
    last_error: str | None = strawberry.field(description="Why the last send failed, if it did.")
    expires_at: datetime = strawberry.field(
        description="Its code works until then (7 days after it was made or last resent)."
    )
    accepted_at: datetime | None
    role: Role = strawberry.field(description="The role the invitee gets.")

    @classmethod
    def of(cls, i: InvitationRecord) -> Invitation:
        return cls(
            id=strawberry.ID(str(i.id)),
            email=i.email,
            status=i.status,
            created_at=i.created_at,
            sent_at=i.sent_at,
            last_error=i.last_error,
            expires_at=i.expires_at,
            accepted_at=i.accepted_at,
            role=i.role,
        )


@strawberry.type
class AcceptInvitationPayload:
    token: str = strawberry.field(description="A new API token for the invited user, shown once.")
    viewer: Viewer


@strawberry.type
class InvitationCode:
    """What an invitation code would do if accepted now (`invitationCode`): nothing is changed."""

    valid: bool
    reason: str | None = strawberry.field(
        description="Why it would be refused: unknown, expired, revoked, accepted, unsent or "
        "member (as acceptInvitation's extensions.reason); null when valid."
    )
    message: str | None = strawberry.field(description="The refusal in words; null when valid.")
    tenant_name: str | None = strawberry.field(description="Only when valid.")
    email: str | None = strawberry.field(description="The invited address; only when valid.")
    role: Role | None = strawberry.field(description="Only when valid.")

    @classmethod
    def of(cls, check: CodeCheck) -> InvitationCode:
        refusal = check.refusal
        return cls(
            valid=refusal is None,
            reason=None if refusal is None else refusal.reason,
            message=None if refusal is None else refusal.message,
            tenant_name=check.tenant_name,
            email=check.email,
            role=check.role,
        )
