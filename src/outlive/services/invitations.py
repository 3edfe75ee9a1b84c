"""Invitations: `inviteMember` writes a PENDING row and queues `email.invitation.v1`.

The job sends the email (SMTP, or the log when `OUTLIVE_SMTP_URL` is unset) and marks the row
SENT; a failure is retried with the jobs-queue backoff and, after the last attempt, the row is
FAILED. The email carries a link with a one-time token of which only a hash is stored. Every
change nudges `invitation.updated`.

There is at most one PENDING invitation per (tenant, email), a partial unique index: inviting
an address whose invitation is still pending hands that invitation back, with no second email.
`lastError` is generic ("mail server answered 550"): the SMTP server's own text can carry
internal host names and is for the log only.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Any
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import Invitation, InvitationStatus
from outlive.db.raw import prepare
from outlive.db.tx import Db, UnitOfWork
from outlive.ids import InvitationId, TenantId, UserId
from outlive.services.addresses import parse_address

log = logging.getLogger(__name__)

MAX_LIST = 200


@dataclass(frozen=True, slots=True)
class InvitationRecord:
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


@dataclass(frozen=True, slots=True)
class Outgoing:
    id: InvitationId
    tenant_id: TenantId
    email: str
    tenant_name: str
    token: str


def _record(i: Mapping[str, Any]) -> InvitationRecord:
    return InvitationRecord(
        id=InvitationId(i["id"]),
        email=i["email"],
        status=InvitationStatus(i["status"]),
        attempts=i["attempts"],
        last_error=i["last_error"],
        created_at=i["created_at"],
        sent_at=i["sent_at"],
        updated_at=i["updated_at"],
        tenant_id=TenantId(i["tenant_id"]),
        dispatched_at=i["dispatched_at"],
    )


_COLUMNS = tuple(Invitation.__table__.c)
# The partial index's predicate is a literal, never a bound parameter: under a generic plan a
# parameter has no value, and PostgreSQL can no longer infer the index (test_generic_plans.py).
_INSERT = prepare(
    text(
        "INSERT INTO invitations (tenant_id, invited_by, email, token_hash)"
        " VALUES (:tenant_id, :invited_by, :email, :token_hash)"
        " ON CONFLICT (tenant_id, email) WHERE status = 'PENDING' DO NOTHING RETURNING *"
    ).columns(*_COLUMNS)
)
_PENDING = prepare(
    text(
        "SELECT * FROM invitations WHERE tenant_id = :tenant_id AND email = :email"
        " AND status = 'PENDING'"
    ).columns(*_COLUMNS)
)


async def invite(
    uow: UnitOfWork, *, email: str, invited_by: UserId | None = None
) -> InvitationRecord:
    """A new PENDING invitation (queued to be sent), or the address's pending one, handed back."""
    tenant_id = uow.require_tenant()
    email = parse_address(email)  # one mailbox, normalized (services/addresses.py)
    values = {
        "tenant_id": tenant_id,
        "invited_by": invited_by,
        "email": email,
        "token_hash": hashlib.sha256(secrets.token_bytes(32)).digest(),  # replaced when sent
    }
    # The pending one can be sent between the two statements; then the insert wins next time.
    for _ in range(10):
        inserted = await uow.one(_INSERT, **values)
        if inserted is not None:
            return _queue(uow, _record(inserted))
        existing = await uow.one(_PENDING, tenant_id=tenant_id, email=email)
        if existing is not None:
            return _record(existing)
    raise RuntimeError("could not insert or find the pending invitation")


def _queue(uow: UnitOfWork, invitation: InvitationRecord) -> InvitationRecord:
    uow.nudge("invitation.updated", invitation.id)
    _dispatch_after_commit(uow, invitation.tenant_id, answer_unavailable=True)
    return invitation


def _dispatch_after_commit(
    uow: UnitOfWork, tenant_id: UUID, *, answer_unavailable: bool = False
) -> None:
    """Admit the tenant's waiting emails (and deliveries) after the commit. An unreachable queue
    fails nothing: the admitted rows stay PENDING and the relay (`services.relay`) sends them once
    it is back, so `dispatch_jobs` no longer raises and `inviteMember` answers normally."""
    uow.admit_after_commit(tenant_id, "jobs", queue_down_raises=answer_unavailable)


async def record_unavailable(uow: UnitOfWork, invitation_id: UUID) -> None:
    """The queue could not be reached when the invitation was admitted."""
    await finish(
        uow,
        InvitationId(invitation_id),
        status=InvitationStatus.FAILED,
        error="queue unavailable: the invitation could not be queued",
        dispatch=False,
    )


_INVITATIONS = prepare(
    text(
        "SELECT * FROM invitations WHERE tenant_id = :tenant_id"
        " ORDER BY created_at DESC, id LIMIT :limit"
    ).columns(*Invitation.__table__.c)
)


async def list_invitations(db: Db, tenant_id: TenantId) -> list[InvitationRecord]:
    return [_record(r) for r in await db.all(_INVITATIONS, tenant_id=tenant_id, limit=MAX_LIST)]


_TAKE_PENDING = prepare(
    text(
        "WITH taken AS (UPDATE invitations SET token_hash = :token_hash"
        " WHERE id = :invitation_id AND status = 'PENDING' RETURNING tenant_id, email)"
        " SELECT taken.tenant_id, taken.email, tenants.name AS tenant_name"
        " FROM taken JOIN tenants ON tenants.id = taken.tenant_id"
    )
)


async def take_pending(uow: UnitOfWork, invitation_id: InvitationId) -> Outgoing | None:
    """The invitation to send, with a fresh one-time token (only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    row = await uow.one(
        _TAKE_PENDING,
        invitation_id=invitation_id,
        token_hash=hashlib.sha256(token.encode()).digest(),
    )
    if row is None:
        return None
    return Outgoing(
        id=invitation_id,
        tenant_id=TenantId(row["tenant_id"]),
        email=row["email"],
        tenant_name=row["tenant_name"] or "",
        token=token,
    )


def compose(outgoing: Outgoing, *, sender: str, public_url: str) -> EmailMessage:
    link = f"{public_url.rstrip('/')}/#invitation={outgoing.token}"
    message = EmailMessage()
    message["From"] = sender
    message["To"] = outgoing.email
    message["Subject"] = f"You are invited to {outgoing.tenant_name} on Outlive"
    message.set_content(
        f"You have been invited to join {outgoing.tenant_name} on Outlive.\n\n"
        f"Accept the invitation: {link}\n"
    )
    return message


_RECORD_ATTEMPT = prepare(
    text(
        "UPDATE invitations SET attempts = attempts + 1, last_error = :error, updated_at = now()"
        " WHERE id = :invitation_id AND status = 'PENDING' RETURNING tenant_id"
    )
)
# SENT or FAILED, only from PENDING; a SENT one counts its attempt and its time.
_FINISH = prepare(
    text(
        "UPDATE invitations SET status = CAST(:status AS text), updated_at = now(),"
        " sent_at = CASE WHEN CAST(:status AS text) = 'SENT' THEN now() ELSE sent_at END,"
        " attempts = attempts + CAST(CAST(:status AS text) = 'SENT' AS int),"
        " last_error = coalesce(CAST(:error AS text), last_error)"
        " WHERE id = :invitation_id AND status = 'PENDING' RETURNING tenant_id"
    )
)


async def record_attempt(uow: UnitOfWork, invitation_id: InvitationId, *, error: str) -> None:
    row = await uow.one(_RECORD_ATTEMPT, invitation_id=invitation_id, error=error)
    if row is not None:
        uow.nudge("invitation.updated", invitation_id, tenant_id=row["tenant_id"])


async def finish(
    uow: UnitOfWork,
    invitation_id: InvitationId,
    *,
    status: InvitationStatus,
    error: str | None = None,
    dispatch: bool = True,
) -> bool:
    """SENT or FAILED, only from PENDING: a redelivered job finds nothing to do. Its slot in the
    tenant's jobs cap is free then (`dispatch`: admit the next waiting one after the commit)."""
    row = await uow.one(_FINISH, invitation_id=invitation_id, status=status.value, error=error)
    if row is None:
        return False
    tenant = row["tenant_id"]
    uow.nudge("invitation.updated", invitation_id, tenant_id=tenant)
    if dispatch:
        _dispatch_after_commit(uow, tenant)
    return True


EXPIRE_AFTER_DAYS = 7
_EXPIRE = prepare(
    text(
        """UPDATE invitations SET status = 'EXPIRED', updated_at = now() WHERE id IN (
             SELECT id FROM invitations WHERE status IN ('PENDING', 'FAILED')
               AND created_at < now() - make_interval(days => :days)
             LIMIT :batch FOR UPDATE SKIP LOCKED)
           RETURNING id, tenant_id"""
    )
)


async def expire_batch(uow: UnitOfWork, *, batch: int = 500) -> int:
    """PENDING or FAILED invitations older than 7 days become EXPIRED (one batch)."""
    rows = await uow.all(_EXPIRE, days=EXPIRE_AFTER_DAYS, batch=batch)
    for row in rows:
        uow.nudge("invitation.updated", row["id"], tenant_id=row["tenant_id"])
    return len(rows)
