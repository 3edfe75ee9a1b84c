"""`invitations` and `inviteMember`."""

from __future__ import annotations

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.invitations import Invitation
from outlive.services import invitations, outbox

Info = strawberry.Info[Context, None]


async def list_invitations(info: Info) -> list[Invitation]:
    ctx = info.context
    s = ctx.services
    async with s.sessions.read() as session:
        found = await invitations.list_invitations(session, ctx.tenant_id)
    await outbox.requeue_stale(
        s.sessions, "invitation", found, grace_s=s.settings.reconcile_grace_s
    )
    return [Invitation.of(i) for i in found]


async def invite_member(info: Info, email: str) -> Invitation:
    ctx = info.context
    principal = ctx.require()
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        invitation = await invitations.invite(uow, email=email, invited_by=principal.user.id)
    return Invitation.of(invitation)
