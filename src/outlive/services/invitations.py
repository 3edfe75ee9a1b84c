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
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Any
from uuid import UUID

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import Invitation, InvitationStatus, Tenant
from outlive.db.tx import UnitOfWork
from outlive.errors import QueueUnavailable
from outlive.ids import InvitationId, TenantId, UserId
from outlive.services.tenants import check_email

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


def _record(i: Invitation) -> InvitationRecord:
    return InvitationRecord(
        id=InvitationId(i.id),
        email=i.email,
        status=InvitationStatus(i.status),
        attempts=i.attempts,
        last_error=i.last_error,
        created_at=i.created_at,
        sent_at=i.sent_at,
        updated_at=i.updated_at,
        tenant_id=TenantId(i.tenant_id),
        dispatched_at=i.dispatched_at,
    )


async def invite(
    uow: UnitOfWork, *, email: str, invited_by: UserId | None = None
) -> InvitationRecord:
    """A new PENDING invitation (queued to be sent), or the address's pending one, handed back."""
    tenant_id = uow.require_tenant()
    email = check_email(email)
    insert = (
        pg_insert(Invitation)
        .values(
            tenant_id=tenant_id,
            invited_by=invited_by,
            email=email,
            token_hash=hashlib.sha256(secrets.token_bytes(32)).digest(),  # replaced when sent
        )
        .on_conflict_do_nothing(
            index_elements=["tenant_id", "email"],
            index_where=text(f"status = '{InvitationStatus.PENDING.value}'"),
        )
        .returning(Invitation)
    )
    pending = select(Invitation).where(
        Invitation.tenant_id == tenant_id,
        Invitation.email == email,
        Invitation.status == InvitationStatus.PENDING.value,
    )
    # The pending one can be sent between the two statements; then the insert wins next time.
    for _ in range(10):
        invitation = (await uow.session.scalars(insert)).first()
        if invitation is not None:
            return _queue(uow, invitation)
        existing = (await uow.session.scalars(pending)).first()
        if existing is not None:
            return _record(existing)
    raise RuntimeError("could not insert or find the pending invitation")


def _queue(uow: UnitOfWork, invitation: Invitation) -> InvitationRecord:
    invitation_id = InvitationId(invitation.id)
    uow.nudge("invitation.updated", invitation_id)
    _dispatch_after_commit(uow, invitation.tenant_id, answer_unavailable=True)
    return _record(invitation)


def _dispatch_after_commit(
    uow: UnitOfWork, tenant_id: UUID, *, answer_unavailable: bool = False
) -> None:
    """Admit the tenant's waiting emails (and deliveries) after the commit. An unreachable queue
    fails nothing: the admitted rows stay PENDING and the relay (`services.relay`) sends them once
    it is back, so `dispatch_jobs` no longer raises and `inviteMember` answers normally."""
    admission = uow.sessions.admission
    if admission is None:
        raise RuntimeError("no admission is wired: invitations are never sent inline")

    async def dispatch() -> None:
        try:
            await admission.dispatch_jobs(tenant_id)
        except QueueUnavailable:
            if answer_unavailable:
                raise
            log.warning("jobs of tenant %s wait: the queue is unreachable", tenant_id)

    uow.after_commit(dispatch)


async def record_unavailable(uow: UnitOfWork, invitation_id: UUID) -> None:
    """The queue could not be reached when the invitation was admitted."""
    await finish(
        uow,
        InvitationId(invitation_id),
        status=InvitationStatus.FAILED,
        error="queue unavailable: the invitation could not be queued",
        dispatch=False,
    )


async def list_invitations(session: AsyncSession, tenant_id: TenantId) -> list[InvitationRecord]:
    rows = await session.scalars(
        select(Invitation)
        .where(Invitation.tenant_id == tenant_id)
        .order_by(Invitation.created_at.desc(), Invitation.id)
        .limit(MAX_LIST)
    )
    return [_record(i) for i in rows]


async def take_pending(uow: UnitOfWork, invitation_id: InvitationId) -> Outgoing | None:
    """The invitation to send, with a fresh one-time token (only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    row = (
        await uow.session.execute(
            update(Invitation)
            .where(
                Invitation.id == invitation_id, Invitation.status == InvitationStatus.PENDING.value
            )
            .values(token_hash=hashlib.sha256(token.encode()).digest())
            .returning(Invitation.tenant_id, Invitation.email)
        )
    ).first()
    if row is None:
        return None
    name = await uow.session.scalar(select(Tenant.name).where(Tenant.id == row.tenant_id))
    return Outgoing(
        id=invitation_id,
        tenant_id=TenantId(row.tenant_id),
        email=row.email,
        tenant_name=name or "",
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


async def record_attempt(uow: UnitOfWork, invitation_id: InvitationId, *, error: str) -> None:
    tenant = await uow.session.scalar(
        update(Invitation)
        .where(Invitation.id == invitation_id, Invitation.status == InvitationStatus.PENDING.value)
        .values(attempts=Invitation.attempts + 1, last_error=error, updated_at=func.now())
        .returning(Invitation.tenant_id)
    )
    if tenant is not None:
        uow.nudge("invitation.updated", invitation_id, tenant_id=tenant)


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
    values: dict[str, Any] = {"status": status.value, "updated_at": func.now()}
    if status is InvitationStatus.SENT:
        values["sent_at"] = func.now()
        values["attempts"] = Invitation.attempts + 1
    if error is not None:
        values["last_error"] = error
    tenant = await uow.session.scalar(
        update(Invitation)
        .where(Invitation.id == invitation_id, Invitation.status == InvitationStatus.PENDING.value)
        .values(**values)
        .returning(Invitation.tenant_id)
    )
    if tenant is None:
        return False
    uow.nudge("invitation.updated", invitation_id, tenant_id=tenant)
    if dispatch:
        _dispatch_after_commit(uow, tenant)
    return True


EXPIRE_AFTER_DAYS = 7
_EXPIRE = text(
    """UPDATE invitations SET status = 'EXPIRED', updated_at = now() WHERE id IN (
         SELECT id FROM invitations WHERE status IN ('PENDING', 'FAILED')
           AND created_at < now() - make_interval(days => :days)
         LIMIT :batch FOR UPDATE SKIP LOCKED)
       RETURNING id, tenant_id"""
)


async def expire_batch(uow: UnitOfWork, *, batch: int = 500) -> int:
    """PENDING or FAILED invitations older than 7 days become EXPIRED (one batch)."""
    rows = (await uow.session.execute(_EXPIRE, {"days": EXPIRE_AFTER_DAYS, "batch": batch})).all()
    for invitation_id, tenant_id in rows:
        uow.nudge("invitation.updated", invitation_id, tenant_id=tenant_id)
    return len(rows)
