"""`invitations`, `inviteMember`, `revokeInvitation`, `resendInvitation` and `acceptInvitation`
(the one operation that takes no bearer token: `graphql/anonymous.py`)."""

from __future__ import annotations

from uuid import UUID

import strawberry

from outlive.errors import NotFound
from outlive.ids import InvitationId
from outlive.resolvers.context import Context
from outlive.schema.invitations import AcceptInvitationPayload, Invitation
from outlive.schema.tenants import Viewer
from outlive.services import invitations, outbox, tenants
from outlive.services.addresses import parse_address, recipient_key
from outlive.services.ratelimits import Bucket, private_subject

Info = strawberry.Info[Context, None]


async def list_invitations(info: Info) -> list[Invitation]:
    ctx = info.context
    s = ctx.services
    found = await invitations.list_invitations(s.sessions, ctx.tenant_id)
    await outbox.requeue_stale(
        "invitation",
        found,
        jobs=s.jobs,
        admission=s.admission,
        grace_s=s.settings.reconcile_grace_s,
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


def _invitation_id(value: strawberry.ID) -> InvitationId:
    try:
        return InvitationId(UUID(str(value)))
    except ValueError:
        raise NotFound("there is no such invitation in this tenant") from None


async def revoke_invitation(info: Info, id: strawberry.ID) -> Invitation:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return Invitation.of(await invitations.revoke(uow, _invitation_id(id)))


async def resend_invitation(info: Info, id: strawberry.ID) -> Invitation:
    """Rate-limited as `inviteMember` is (a resend sends an email)."""
    ctx = info.context
    settings = ctx.services.settings
    await ctx.services.limiter.take(
        Bucket("invite", str(ctx.tenant_id), settings.rate_invite),
        message="too many invitations: try again later",
    )
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return Invitation.of(await invitations.resend(uow, _invitation_id(id)))


async def accept_invitation(info: Info, code: str) -> AcceptInvitationPayload:
    """The invited user, made in the invitation's tenant, and a new API token for them (shown
    once). The code is single use and dies with the invitation; any refusal is BAD_USER_INPUT
    with `extensions.reason`. Limited per client address: it needs no bearer token."""
    ctx = info.context
    client = ctx.request.client if ctx.request is not None else None
    await ctx.services.limiter.take(
        Bucket(
            "accept-invitation",
            private_subject(client.host if client else "unknown"),
            ctx.services.settings.rate_accept_invitation,
        ),
        message="too many attempts: try again later",
    )
    async with ctx.services.sessions.unit() as uow:
        accepted = await invitations.take_code(uow, code)
        principal, token = await tenants.create_token(
            uow, tenant_slug=accepted.tenant_slug, email=accepted.email
        )
        await invitations.record_acceptance(uow, accepted.invitation_id, principal.user.id)
    return AcceptInvitationPayload(token=token, viewer=Viewer.of(principal))
