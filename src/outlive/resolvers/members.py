"""`members`, `setMemberRole` and `removeMember` (ADMIN: `resolvers/roles.py`).

The change is committed first; then this process drops the tokens from its cache (and closes a
removed member's sockets) at once, and every other API process is told (`Announcer`): a removed
member's requests answer 401 and their sockets close with 4403 within a second, and a changed
role is read again on the member's next request. An announcement Redis cannot carry is logged:
each process's principal cache expires within `OUTLIVE_AUTH_CACHE_S` and its sockets are
re-checked every `OUTLIVE_WS_RECHECK_S` anyway (`services/tokens.py`).
"""

from __future__ import annotations

import logging
from uuid import UUID

import strawberry
from redis.exceptions import RedisError

from outlive.errors import NotFound
from outlive.ids import TokenId, UserId
from outlive.realtime.revocations import CHANGED, REVOKED, Change
from outlive.resolvers.context import Context
from outlive.schema.members import Member, Role
from outlive.services import members

log = logging.getLogger(__name__)

Info = strawberry.Info[Context, None]


async def list_members(info: Info) -> list[Member]:
    ctx = info.context
    ctx.require_member()
    return [Member.of(m) for m in await members.list_members(ctx.services.sessions, ctx.tenant_id)]


def _user_id(value: strawberry.ID) -> UserId:
    try:
        return UserId(UUID(str(value)))
    except ValueError:
        raise NotFound("there is no such member in this tenant") from None


async def set_member_role(info: Info, user_id: strawberry.ID, role: Role) -> Member:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        changed = await members.set_member_role(uow, _user_id(user_id), role)
    await _announce(ctx, CHANGED, changed.token_ids)
    assert changed.member is not None  # noqa: S101 (a member whose role changed is still one)
    return Member.of(changed.member)


async def remove_member(info: Info, user_id: strawberry.ID) -> bool:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        changed = await members.remove_member(uow, _user_id(user_id))
    await _announce(ctx, REVOKED, changed.token_ids)
    return True


async def _announce(ctx: Context, change: Change, token_ids: list[TokenId]) -> None:
    services = ctx.services
    for token_id in token_ids:  # here at once; elsewhere when the announcement arrives
        services.auth.revoked(token_id)
        if change == REVOKED:
            services.sockets.close_token(token_id)
    try:
        await ctx.services.announcer.announce(change, token_ids)
    except (RedisError, OSError) as exc:
        log.warning("%d token change(s) committed but not announced (%r)", len(token_ids), exc)
