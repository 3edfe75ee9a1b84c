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
from urllib.parse import quote, urlencode
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import Invitation, InvitationStatus
from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import Db, UnitOfWork
from outlive.errors import BadUserInput, NotFound
from outlive.ids import InvitationId, TenantId, UserId
from outlive.services import outbox
from outlive.services.addresses import parse_address

log = logging.getLogger(__name__)

MAX_LIST = 200


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


@dataclass(frozen=True, slots=True)
class Outgoing:
    id: InvitationId
    tenant_id: TenantId
    email: str
    tenant_name: str
    token: str


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
            return _queue(uow, InvitationRecord.from_row(inserted))
        existing = await uow.one(_PENDING, tenant_id=tenant_id, email=email)
        if existing is not None:
            return InvitationRecord.from_row(existing)
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
    return [
        InvitationRecord.from_row(r)
        for r in await db.all(_INVITATIONS, tenant_id=tenant_id, limit=MAX_LIST)
    ]


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
    # The tenant's name and the address ride along for the accept screen to say whose tenant
    # it is before anything is sent; the code alone decides what accepting does.
    about = urlencode({"tenant": outgoing.tenant_name, "email": outgoing.email}, quote_via=quote)
    link = f"{public_url.rstrip('/')}/#invitation={outgoing.token}&{about}"
    message = EmailMessage()
    message["From"] = sender
    message["To"] = outgoing.email
    message["Subject"] = f"You are invited to {outgoing.tenant_name} on Outlive"
    message.set_content(
        f"You have been invited to join {outgoing.tenant_name} on Outlive.\n\n"
        f"Accept the invitation: {link}\n"
    )
    return message


async def record_attempt(uow: UnitOfWork, invitation_id: InvitationId, *, error: str) -> None:
    """A try that did not succeed; the row stays PENDING for the next one."""
    await outbox.record_attempt(uow, outbox.INVITATION, invitation_id, error=error)


async def finish(
    uow: UnitOfWork,
    invitation_id: InvitationId,
    *,
    status: InvitationStatus,
    error: str | None = None,
    dispatch: bool = True,
) -> bool:
    """SENT or FAILED, only from PENDING: a redelivered job finds nothing to do. Its slot in the
    tenant's jobs cap is free then (`dispatch`: admit the next waiting one after the commit). A
    SENT one counts its attempt and its time."""
    return await outbox.finish(
        uow,
        outbox.INVITATION,
        invitation_id,
        status=status.value,
        error=error,
        count_attempt=status is InvitationStatus.SENT,
        dispatch=dispatch,
    )


_EXPIRE = prepare(
    text(
        """UPDATE invitations SET status = 'EXPIRED', updated_at = now() WHERE id IN (
             SELECT id FROM invitations WHERE status IN ('PENDING', 'SENT', 'FAILED')
               AND expires_at < now()
             LIMIT :batch FOR UPDATE SKIP LOCKED)
           RETURNING id, tenant_id"""
    )
)


async def expire_batch(uow: UnitOfWork, *, batch: int = 500) -> int:
    """PENDING, SENT or FAILED invitations past their `expires_at` (7 days after they were made
    or last resent) become EXPIRED (one batch)."""
    rows = await uow.all(_EXPIRE, batch=batch)
    for row in rows:
        uow.nudge("invitation.updated", row["id"], tenant_id=row["tenant_id"])
    return len(rows)


# --- accept, revoke, resend (contract §4.1) ----------------------------------------------------


class InvitationRefused(BadUserInput):
    """An invitation code that cannot be used, with why: `unknown`, `expired`, `revoked`,
    `accepted` (used already) or `unsent` (not sent yet, or its sending failed)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def extensions(self) -> dict[str, object]:
        return {"reason": self.reason}


_REFUSALS = {
    "unknown": "This invitation code is not valid: ask for a new invitation.",
    "expired": "This invitation has expired: ask whoever invited you to send it again.",
    "revoked": "This invitation was revoked: ask whoever invited you for a new one.",
    "accepted": "This invitation was already accepted: sign in with your API token.",
    "unsent": "This invitation was not sent yet: use the link in the email once it arrives.",
}

# Only a SENT invitation's code is the one its email carries (each send draws a new one, and a
# resend draws one more), and only before `expires_at`; the row lock makes the code single use.
_TAKE_CODE = prepare(
    text(
        "UPDATE invitations SET status = 'ACCEPTED', accepted_at = now(), updated_at = now()"
        " WHERE token_hash = :token_hash AND status = 'SENT' AND expires_at > now()"
        " RETURNING invitations.id, invitations.tenant_id, invitations.email,"
        " (SELECT slug FROM tenants WHERE tenants.id = invitations.tenant_id) AS slug"
    )
)
_CODE_STATUS = prepare(
    text(
        "SELECT status, expires_at <= now() AS is_expired FROM invitations"
        " WHERE token_hash = :token_hash"
    )
)
_MARK_ACCEPTED_BY = prepare(
    text("UPDATE invitations SET accepted_by = :user_id WHERE id = :invitation_id")
)


@dataclass(frozen=True, slots=True)
class Accepted:
    invitation_id: InvitationId
    tenant_slug: str
    email: str


async def take_code(uow: UnitOfWork, code: str) -> Accepted:
    """Mark the invitation whose emailed code this is ACCEPTED (once), or `InvitationRefused`.
    The caller makes the user and the token in the same unit (`record_acceptance`)."""
    token_hash = hashlib.sha256(code.strip().encode()).digest() if 0 < len(code) <= 200 else b""
    row = await uow.one(_TAKE_CODE, token_hash=token_hash)
    if row is None:
        raise _refusal(await uow.one(_CODE_STATUS, token_hash=token_hash))
    uow.nudge("invitation.updated", row["id"], tenant_id=row["tenant_id"])
    return Accepted(InvitationId(row["id"]), row["slug"], row["email"])


def _refusal(row: Mapping[str, Any] | None) -> InvitationRefused:
    if row is None:
        reason = "unknown"
    elif row["status"] in ("EXPIRED", "REVOKED", "ACCEPTED"):
        reason = row["status"].lower()
    elif row["is_expired"]:
        reason = "expired"
    else:
        reason = "unsent"
    return InvitationRefused(reason, _REFUSALS[reason])


async def record_acceptance(uow: UnitOfWork, invitation_id: InvitationId, user_id: UserId) -> None:
    await uow.execute(_MARK_ACCEPTED_BY, invitation_id=invitation_id, user_id=user_id)


_REVOKE = prepare(
    text(
        "UPDATE invitations SET status = 'REVOKED', updated_at = now()"
        " WHERE id = :invitation_id AND tenant_id = :tenant_id AND status <> 'ACCEPTED'"
        " RETURNING *"
    ).columns(*_COLUMNS)
)
_ONE = prepare(
    text("SELECT * FROM invitations WHERE id = :invitation_id AND tenant_id = :tenant_id").columns(
        *_COLUMNS
    )
)


async def revoke(uow: UnitOfWork, invitation_id: InvitationId) -> InvitationRecord:
    """REVOKED: its code no longer works, and a send still due is not made. An accepted one
    cannot be revoked (BAD_USER_INPUT); another tenant's id is NOT_FOUND."""
    tenant_id = uow.require_tenant()
    row = await uow.one(_REVOKE, invitation_id=invitation_id, tenant_id=tenant_id)
    if row is None:
        await _existing(uow, invitation_id, tenant_id)
        raise BadUserInput("this invitation was accepted: it can no longer be revoked")
    invitation = InvitationRecord.from_row(row)
    uow.nudge("invitation.updated", invitation.id)
    _dispatch_after_commit(uow, tenant_id)  # a send it held a place for frees that place
    return invitation


async def _existing(
    uow: UnitOfWork, invitation_id: InvitationId, tenant_id: UUID
) -> InvitationRecord:
    row = await uow.one(_ONE, invitation_id=invitation_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound("there is no such invitation in this tenant")
    return InvitationRecord.from_row(row)


# Back to PENDING with a fresh (unknown) code, a new week and no attempts: sent again by the job.
# Unless the address already has a PENDING invitation (the partial unique index): that one goes.
_RESEND = prepare(
    text(
        "UPDATE invitations SET status = 'PENDING', token_hash = :token_hash, attempts = 0,"
        " last_error = NULL, sent_at = NULL, dispatched_at = NULL, updated_at = now(),"
        " expires_at = now() + interval '7 days', relay_after = now() + interval '10 seconds'"
        " WHERE id = :invitation_id AND tenant_id = :tenant_id"
        " AND status IN ('SENT', 'FAILED', 'EXPIRED', 'REVOKED')"
        " AND NOT EXISTS (SELECT 1 FROM invitations p WHERE p.tenant_id = :tenant_id"
        " AND p.email = invitations.email AND p.status = 'PENDING')"
        " RETURNING *"
    ).columns(*_COLUMNS)
)


async def resend(uow: UnitOfWork, invitation_id: InvitationId) -> InvitationRecord:
    """Send it again with a new code (the old link stops working) and a new week. A PENDING
    one is being sent already, and an address with a PENDING invitation has that one: both are
    handed back as they are. An accepted one cannot be resent (BAD_USER_INPUT)."""
    tenant_id = uow.require_tenant()
    row = await uow.one(
        _RESEND,
        invitation_id=invitation_id,
        tenant_id=tenant_id,
        token_hash=hashlib.sha256(secrets.token_bytes(32)).digest(),
    )
    if row is not None:
        return _queue(uow, InvitationRecord.from_row(row))
    existing = await _existing(uow, invitation_id, tenant_id)
    if existing.status is InvitationStatus.ACCEPTED:
        raise BadUserInput("this invitation was accepted: there is nothing to resend")
    if existing.status is InvitationStatus.PENDING:
        return existing
    pending = await uow.one(_PENDING, tenant_id=tenant_id, email=existing.email)
    return existing if pending is None else InvitationRecord.from_row(pending)
