"""An invitation's life: invited (the address's older links void), sent by `email.invitation.v1`,
revoked, resent, expired (`invitations/`)."""

from __future__ import annotations

import hashlib
import logging
import secrets
from email.message import EmailMessage
from urllib.parse import quote, urlencode
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import Invitation, InvitationStatus, Role
from outlive.db.raw import prepare
from outlive.db.tx import Db, UnitOfWork
from outlive.errors import BadUserInput
from outlive.ids import InvitationId, TenantId, UserId
from outlive.services import members, outbox
from outlive.services.addresses import parse_address
from outlive.services.invitations.records import (
    COLUMNS,
    MAX_LIST,
    PENDING,
    InvitationRecord,
    Outgoing,
    read_invitation,
)
from outlive.services.tenants import naming_secret

log = logging.getLogger(__name__)

# The partial index's predicate is a literal, never a bound parameter: under a generic plan a
# parameter has no value, and PostgreSQL can no longer infer the index (test_generic_plans.py).
_INSERT = prepare(
    text(
        "INSERT INTO invitations (tenant_id, invited_by, email, token_hash, role)"
        " VALUES (:tenant_id, :invited_by, :email, :token_hash, :role)"
        " ON CONFLICT (tenant_id, email) WHERE status = 'PENDING' DO NOTHING RETURNING *"
    ).columns(*COLUMNS)
)
# The address's links not accepted yet stop working (but an unsent one of the role asked for,
# which is handed back), or all of them once one was accepted (`except_id`).
_VOID = prepare(
    text(
        "UPDATE invitations SET status = 'REVOKED', updated_at = now()"
        " WHERE tenant_id = :tenant_id AND email = :email"
        " AND status IN ('PENDING', 'SENT', 'FAILED')"
        " AND id IS DISTINCT FROM CAST(:except_id AS uuid)"
        " AND NOT (status = 'PENDING' AND role = CAST(:keep_role AS text))"
        " RETURNING id"
    )
)


async def invite(
    uow: UnitOfWork, *, email: str, role: Role, invited_by: UserId | None = None
) -> InvitationRecord:
    """A new PENDING invitation (queued to be sent) that voids the address's older ones, or its
    unsent one of the same role, handed back. A member already is refused (BAD_USER_INPUT)."""
    tenant_id = uow.require_tenant()
    email = parse_address(email)  # one mailbox, normalized (services/addresses.py)
    if await members.is_member(uow, TenantId(tenant_id), email):
        raise BadUserInput(f"{email} is a member of this tenant already: change their role instead")
    values = {
        "tenant_id": tenant_id,
        "invited_by": invited_by,
        "email": email,
        "token_hash": hashlib.sha256(secrets.token_bytes(32)).digest(),  # replaced when sent
        "role": role.value,
    }
    # The pending one can be sent between the statements; then the insert wins next time.
    for _ in range(10):
        await void_links(uow, tenant_id, email, keep_role=role)
        inserted = await uow.one(_INSERT, **values)
        if inserted is not None:
            return _queue(uow, InvitationRecord.from_row(inserted))
        existing = await uow.one(PENDING, tenant_id=tenant_id, email=email)
        if existing is not None:
            return InvitationRecord.from_row(existing)
    raise RuntimeError("could not insert or find the pending invitation")


async def void_links(
    uow: UnitOfWork,
    tenant_id: UUID,
    email: str,
    *,
    keep_role: Role | None = None,
    except_id: InvitationId | None = None,
) -> None:
    voided = await uow.all(
        _VOID, tenant_id=tenant_id, email=email, keep_role=keep_role, except_id=except_id
    )
    for row in voided:
        uow.nudge("invitation.updated", row["id"], tenant_id=tenant_id)
    if voided:
        _dispatch_after_commit(uow, tenant_id)  # a send they held a place for frees it


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


_PENDING_TENANT = prepare(
    text("SELECT tenant_id FROM invitations WHERE id = :invitation_id AND status = 'PENDING'")
)
_TAKE_PENDING = prepare(
    text(
        "WITH taken AS (UPDATE invitations SET token_hash = :token_hash"
        " WHERE id = :invitation_id AND status = 'PENDING' RETURNING tenant_id, email)"
        " SELECT taken.tenant_id, taken.email, tenants.name AS tenant_name"
        " FROM taken JOIN tenants ON tenants.id = taken.tenant_id"
    )
)


async def take_pending(uow: UnitOfWork, invitation_id: InvitationId) -> Outgoing | None:
    """The invitation to send, with a fresh one-time code (only its hash is stored). The code
    names its tenant (`naming_secret`), so that `acceptInvitation`, which carries no token, is
    routed to the tenant's cell (docs/cells.md)."""
    pending = await uow.one(_PENDING_TENANT, invitation_id=invitation_id)
    if pending is None:
        return None
    token = naming_secret(TenantId(pending["tenant_id"]))
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


_REVOKE = prepare(
    text(
        "UPDATE invitations SET status = 'REVOKED', updated_at = now()"
        " WHERE id = :invitation_id AND tenant_id = :tenant_id AND status <> 'ACCEPTED'"
        " RETURNING *"
    ).columns(*COLUMNS)
)


async def revoke(uow: UnitOfWork, invitation_id: InvitationId) -> InvitationRecord:
    """REVOKED: its code no longer works, and a send still due is not made. An accepted one
    cannot be revoked (BAD_USER_INPUT); another tenant's id is NOT_FOUND."""
    tenant_id = uow.require_tenant()
    row = await uow.one(_REVOKE, invitation_id=invitation_id, tenant_id=tenant_id)
    if row is None:
        await read_invitation(uow, tenant_id, invitation_id)
        raise BadUserInput("this invitation was accepted: it can no longer be revoked")
    invitation = InvitationRecord.from_row(row)
    uow.nudge("invitation.updated", invitation.id)
    _dispatch_after_commit(uow, tenant_id)  # a send it held a place for frees that place
    return invitation


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
    ).columns(*COLUMNS)
)


async def resend(uow: UnitOfWork, invitation_id: InvitationId) -> InvitationRecord:
    """Send it again with a new code (the old link stops working) and a new week; the address's
    other links stop working too (one link per address). A PENDING one is being sent already,
    and an address with a PENDING invitation has that one: both are handed back as they are. An
    accepted one, or one to a member already, cannot be resent (BAD_USER_INPUT)."""
    tenant_id = uow.require_tenant()
    found = await read_invitation(uow, tenant_id, invitation_id)
    if found.status is not InvitationStatus.ACCEPTED and await members.is_member(
        uow, TenantId(tenant_id), found.email
    ):
        raise BadUserInput(f"{found.email} is a member of this tenant already: nothing to resend")
    row = await uow.one(
        _RESEND,
        invitation_id=invitation_id,
        tenant_id=tenant_id,
        token_hash=hashlib.sha256(secrets.token_bytes(32)).digest(),
    )
    if row is not None:
        await void_links(uow, tenant_id, found.email, except_id=invitation_id)
        return _queue(uow, InvitationRecord.from_row(row))
    existing = await read_invitation(uow, tenant_id, invitation_id)
    if existing.status is InvitationStatus.ACCEPTED:
        raise BadUserInput("this invitation was accepted: there is nothing to resend")
    if existing.status is InvitationStatus.PENDING:
        return existing
    pending = await uow.one(PENDING, tenant_id=tenant_id, email=existing.email)
    return existing if pending is None else InvitationRecord.from_row(pending)
