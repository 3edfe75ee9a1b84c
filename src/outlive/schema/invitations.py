"""Invitations (contract §4)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.db.models import InvitationStatus as DbInvitationStatus
from outlive.schema.tenants import Viewer
from outlive.services.invitations import InvitationRecord

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
        )


@strawberry.type
class AcceptInvitationPayload:
    token: str = strawberry.field(description="A new API token for the invited user, shown once.")
    viewer: Viewer
