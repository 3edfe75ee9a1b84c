"""`invitations` and `inviteMember`."""

from __future__ import annotations

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.invitations import Invitation
from outlive.services import invitations, outbox
from outlive.services.addresses import parse_address, recipient_key
from outlive.services.ratelimits import Bucket, private_subject

Info = strawberry.Info[Context, None]


async def list_invitations(info: Info) -> list[Invitation]:
    ctx = info.context
    s = ctx.services
    found = await invitations.list_invitations(s.sessions, ctx.tenant_id)
    await outbox.requeue_stale(
        s.sessions, "invitation", found, grace_s=s.settings.reconcile_grace_s
    )
    return [Invitation.of(i) for i in found]


async def invite_member(info: Info, email: str) -> Invitation:
    """One PENDING invitation per address: inviting again hands it back (no second email).
    Rate-limited per tenant and per (tenant, recipient)."""
    ctx = info.context
    principal = ctx.require()
    settings = ctx.services.settings
    address = parse_address(email)  # BAD_USER_INPUT before a token is taken
    tenant = str(principal.tenant.id)
    await ctx.services.limiter.take(
        Bucket("invite", tenant, settings.rate_invite),
        Bucket(
            "invite-to",
            private_subject(tenant, recipient_key(address)),
            settings.rate_invite_recipient,
        ),
        message="too many invitations: try again later",
    )
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        invitation = await invitations.invite(uow, email=address, invited_by=principal.user.id)
    return Invitation.of(invitation)
