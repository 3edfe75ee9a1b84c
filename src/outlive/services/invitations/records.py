"""An invitation as a record, and the statements that read one (`invitations/`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import Invitation, InvitationStatus, Role
from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import Db
from outlive.errors import NotFound
from outlive.ids import InvitationId, TenantId

MAX_LIST = 200
COLUMNS = tuple(Invitation.__table__.c)


@dataclass(frozen=True, slots=True)
class InvitationRecord(Record):
    id: InvitationId
    email: str
    status: InvitationStatus
    attempts: int
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None
    updated_at: datetime
    tenant_id: TenantId
    dispatched_at: datetime | None
    expires_at: datetime
    accepted_at: datetime | None
    role: Role


@dataclass(frozen=True, slots=True)
class Outgoing:
    id: InvitationId
    tenant_id: TenantId
    email: str
    tenant_name: str
    token: str


PENDING = prepare(
    text(
        "SELECT * FROM invitations WHERE tenant_id = :tenant_id AND email = :email"
        " AND status = 'PENDING'"
    ).columns(*COLUMNS)
)
ONE = prepare(
    text("SELECT * FROM invitations WHERE id = :invitation_id AND tenant_id = :tenant_id").columns(
        *COLUMNS
    )
)


async def read_invitation(db: Db, tenant_id: UUID, invitation_id: InvitationId) -> InvitationRecord:
    """One of the tenant's invitations; NOT_FOUND for another tenant's or an unknown id."""
    row = await db.one(ONE, invitation_id=invitation_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound("there is no such invitation in this tenant")
    return InvitationRecord.from_row(row)
