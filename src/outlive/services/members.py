"""A tenant's members (its users) and their roles: `members`, `setMemberRole`, `removeMember`.

A member's role bounds every token of theirs (a token acts with the lower of its own role and
its member's, `Role.effective`). Removing a member sets `removed_at` and revokes their tokens in
the same unit: from the commit on, no request or socket of theirs gets in. The caller announces
the tokens returned (`realtime.revocations`) after the commit, so every API process evicts them
from its cache, and closes a removed member's sockets, within a second.

**The last ADMIN stays.** Demoting or removing an ADMIN first locks every ADMIN row of the
tenant (`FOR UPDATE`, in id order): two admins demoting each other at once are serialized, and
the second finds itself the last one and is refused. Every change nudges `member.updated`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text

from outlive.db.models import Role
from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import Db, UnitOfWork
from outlive.errors import BadUserInput, NotFound
from outlive.ids import TenantId, TokenId, UserId


@dataclass(frozen=True, slots=True)
class MemberRecord(Record):
    user_id: UserId
    email: str
    role: Role
    joined_at: datetime
    tokens: int  # live API tokens (not revoked, not expired; run read tokens aside)


@dataclass(frozen=True, slots=True)
class Changed:
    """A member changed: the member as it is now (None: removed) and the tokens to announce."""

    member: MemberRecord | None
    token_ids: list[TokenId]


_LIVE_TOKENS = (
    "(SELECT count(*) FROM api_tokens t WHERE t.user_id = u.id AND t.run_id IS NULL"
    " AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now()))"
)
_SELECT = f"SELECT u.id AS user_id, u.email, u.role, u.created_at AS joined_at, {_LIVE_TOKENS}"
_MEMBERS = prepare(
    text(
        f"{_SELECT} AS tokens FROM users u WHERE u.tenant_id = :tenant_id"
        " AND u.removed_at IS NULL ORDER BY u.created_at, u.id"
    )
)
_MEMBER = prepare(
    text(
        f"{_SELECT} AS tokens FROM users u WHERE u.id = :user_id AND u.tenant_id = :tenant_id"
        " AND u.removed_at IS NULL"
    )
)
_LOCK_ADMINS = prepare(
    text(
        "SELECT id FROM users WHERE tenant_id = :tenant_id AND role = 'ADMIN'"
        " AND removed_at IS NULL ORDER BY id FOR UPDATE"
    )
)
_SET_ROLE = prepare(text("UPDATE users SET role = :role WHERE id = :user_id"))
_REMOVE = prepare(text("UPDATE users SET removed_at = now() WHERE id = :user_id"))
_TOKENS_OF = prepare(
    text("SELECT id FROM api_tokens WHERE user_id = :user_id AND revoked_at IS NULL")
)
_REVOKE_ALL = prepare(
    text(
        "UPDATE api_tokens SET revoked_at = now() WHERE user_id = :user_id"
        " AND revoked_at IS NULL RETURNING id"
    )
)
_IS_MEMBER = prepare(
    text(
        "SELECT 1 FROM users WHERE tenant_id = :tenant_id AND email = :email AND removed_at IS NULL"
    )
)


async def list_members(db: Db, tenant_id: TenantId) -> list[MemberRecord]:
    """The tenant's members, oldest first."""
    return [MemberRecord.from_row(r) for r in await db.all(_MEMBERS, tenant_id=tenant_id)]


async def is_member(db: Db, tenant_id: TenantId, email: str) -> bool:
    return await db.one(_IS_MEMBER, tenant_id=tenant_id, email=email) is not None


async def set_member_role(uow: UnitOfWork, user_id: UserId, role: Role) -> Changed:
    """The member's new role (their tokens act with it from the commit on). The last ADMIN
    cannot be demoted (BAD_USER_INPUT); another tenant's user is NOT_FOUND."""
    member = await _locked_member(uow, user_id, leaving_admin=role is not Role.ADMIN)
    if member.role is not role:
        await uow.execute(_SET_ROLE, user_id=user_id, role=role)
        uow.nudge("member.updated", user_id)
    tokens = [TokenId(r["id"]) for r in await uow.all(_TOKENS_OF, user_id=user_id)]
    changed = MemberRecord(member.user_id, member.email, role, member.joined_at, member.tokens)
    return Changed(changed, tokens)


async def remove_member(uow: UnitOfWork, user_id: UserId) -> Changed:
    """The member is removed and every token of theirs revoked (returned, to announce). The
    last ADMIN cannot be removed (BAD_USER_INPUT); another tenant's user is NOT_FOUND."""
    await _locked_member(uow, user_id, leaving_admin=True)
    await uow.execute(_REMOVE, user_id=user_id)
    revoked = [TokenId(r["id"]) for r in await uow.all(_REVOKE_ALL, user_id=user_id)]
    uow.nudge("member.updated", user_id)
    return Changed(None, revoked)


async def _locked_member(uow: UnitOfWork, user_id: UserId, *, leaving_admin: bool) -> MemberRecord:
    """The member, after locking the tenant's ADMIN rows when the change may leave it without
    one; `BadUserInput` when the member is its last ADMIN and `leaving_admin`."""
    tenant_id = uow.require_tenant()
    admins = [r["id"] for r in await uow.all(_LOCK_ADMINS, tenant_id=tenant_id)]
    row = await uow.one(_MEMBER, user_id=user_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound("there is no such member in this tenant")
    member = MemberRecord.from_row(row)
    if leaving_admin and member.role is Role.ADMIN and admins == [user_id]:
        raise BadUserInput(
            f"{member.email} is the tenant's last ADMIN: make another member ADMIN first"
        )
    return member
