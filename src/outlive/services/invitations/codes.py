"""Invitation codes: what the accept page checks (`check_code`) and what `acceptInvitation`
takes (`take_code`), once (`invitations/`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from outlive.db.models import Role
from outlive.db.raw import prepare
from outlive.db.tx import Db, UnitOfWork
from outlive.errors import BadUserInput
from outlive.ids import InvitationId, TenantId, UserId
from outlive.services import members
from outlive.services.invitations.lifecycle import void_links


class InvitationRefused(BadUserInput):
    """An invitation code that cannot be used, with why: `unknown`, `expired`, `revoked`,
    `accepted` (used already), `unsent` (not sent yet, or its sending failed) or `member` (the
    address is a member already)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def extensions(self) -> dict[str, object]:
        return {"reason": self.reason}


_REFUSALS = {
    "unknown": "This invitation code is not valid: ask for a new invitation.",
    "member": "You are a member of this tenant already: sign in with your API token.",
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
        " RETURNING invitations.id, invitations.tenant_id, invitations.email, invitations.role,"
        " (SELECT slug FROM tenants WHERE tenants.id = invitations.tenant_id) AS slug"
    )
)
_CODE_STATUS = prepare(
    text(
        "SELECT i.status, i.expires_at <= now() AS is_expired, i.email, i.role,"
        " t.name AS tenant_name FROM invitations i JOIN tenants t ON t.id = i.tenant_id"
        " WHERE i.token_hash = :token_hash"
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
    role: Role


@dataclass(frozen=True, slots=True)
class CodeCheck:
    """What the accept page shows when it opens: whether the code would be accepted now, and
    why not (`refusal`); whose invitation it is only when it would be."""

    refusal: InvitationRefused | None
    tenant_name: str | None = None
    email: str | None = None
    role: Role | None = None


def _code_hash(code: str) -> bytes:
    return hashlib.sha256(code.strip().encode()).digest() if 0 < len(code) <= 200 else b""


async def check_code(db: Db, code: str) -> CodeCheck:
    """Would `take_code` accept this code now? Nothing is changed."""
    row = await db.one(_CODE_STATUS, token_hash=_code_hash(code))
    if row is None or row["status"] != "SENT" or row["is_expired"]:
        return CodeCheck(_refusal(row))
    return CodeCheck(None, row["tenant_name"], row["email"], Role(row["role"]))


async def take_code(uow: UnitOfWork, code: str) -> Accepted:
    """Mark the invitation whose emailed code this is ACCEPTED (once), or `InvitationRefused`;
    the address's other links stop working. An address that is a member already is refused
    (`member`). The caller makes the user and the token in the same unit (`record_acceptance`)."""
    token_hash = _code_hash(code)
    row = await uow.one(_TAKE_CODE, token_hash=token_hash)
    if row is None:
        raise _refusal(await uow.one(_CODE_STATUS, token_hash=token_hash))
    if await members.is_member(uow, TenantId(row["tenant_id"]), row["email"]):
        raise InvitationRefused("member", _REFUSALS["member"])  # rolled back: still usable
    accepted = InvitationId(row["id"])
    uow.nudge("invitation.updated", accepted, tenant_id=row["tenant_id"])
    await void_links(uow, row["tenant_id"], row["email"], except_id=accepted)  # one link, once
    return Accepted(accepted, row["slug"], row["email"], Role(row["role"]))


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
