"""`invitations`, `inviteMember`, `revokeInvitation`, `resendInvitation`, and the two fields that
take no bearer token (`graphql/anonymous.py`): `acceptInvitation` and `invitationCode`, which the
accept page asks when it opens. Both are limited per client (`services/clients.py`): the client
behind the proxies the operator trusts, never a header the client writes."""

from __future__ import annotations

from uuid import UUID

import strawberry

from outlive.errors import NotFound
from outlive.ids import InvitationId
from outlive.resolvers.context import Context
from outlive.schema.invitations import AcceptInvitationPayload, Invitation, InvitationCode
from outlive.schema.members import Role
from outlive.schema.tenants import Viewer
from outlive.services import invitations, outbox, tenants
from outlive.services.addresses import parse_address, recipient_key
from outlive.services.clients import client_address
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


async def invite_member(info: Info, email: str, role: Role = Role.OPERATOR) -> Invitation:
    """A new invitation (the address's older ones stop working), or its unsent one of the same
    role handed back. Rate-limited per tenant and per (tenant, recipient)."""
    ctx = info.context
    principal = ctx.require()
    address = parse_address(email)  # BAD_USER_INPUT before a token is taken
    await _take_invite(ctx, address)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        invitation = await invitations.invite(
            uow, email=address, role=role, invited_by=principal.user.id
        )
    return Invitation.of(invitation)


async def _take_invite(ctx: Context, address: str) -> None:
    """One email to `address`: from the tenant's bucket and the (tenant, recipient) one."""
    settings, tenant = ctx.services.settings, str(ctx.tenant_id)
    await ctx.services.limiter.take(
        Bucket("invite", tenant, settings.rate_invite),
        Bucket(
            "invite-to",
            private_subject(tenant, recipient_key(address)),
            settings.rate_invite_recipient,
            owner=tenant,
        ),
        message="too many invitations: try again later",
    )


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
    """Rate-limited as `inviteMember` is, recipient included (a resend sends an email). The
    invitation is looked up under the caller's tenant before any bucket is taken."""
    ctx = info.context
    invitation_id = _invitation_id(id)
    found = await invitations.read_invitation(ctx.services.sessions, ctx.tenant_id, invitation_id)
    await _take_invite(ctx, found.email)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return Invitation.of(await invitations.resend(uow, invitation_id))


async def _take_client(ctx: Context) -> None:
    """The per-client bucket of the fields that take no token (`OUTLIVE_RATE_ACCEPT_INVITATION`)."""
    settings = ctx.services.settings
    scope = ctx.request.scope if ctx.request is not None else {}
    peer = scope.get("client")
    client = client_address(
        peer[0] if peer else None, scope.get("headers", ()), settings.trusted_proxies
    )
    await ctx.services.limiter.take(
        Bucket("accept-invitation", private_subject(client), settings.rate_accept_invitation),
        message="too many attempts: try again later",
    )


async def invitation_code(info: Info, code: str) -> InvitationCode:
    """What accepting this code would do now (nothing is changed): the accept page asks it when
    it opens, so a revoked, used or expired link says so before anyone clicks."""
    ctx = info.context
    await _take_client(ctx)
    services = await ctx.services.for_code(code)
    return InvitationCode.of(await invitations.check_code(services.sessions, code))


async def accept_invitation(info: Info, code: str) -> AcceptInvitationPayload:
    """The invited user, made a member of the invitation's tenant with its role, and a new API
    token for them (shown once). The code is single use and dies with the invitation; any
    refusal is BAD_USER_INPUT with `extensions.reason`. Limited per client: it needs no bearer
    token."""
    ctx = info.context
    await _take_client(ctx)
    services = await ctx.services.for_code(code)  # with cells: the code's tenant's cell
    async with services.sessions.unit() as uow:
        accepted = await invitations.take_code(uow, code)
        principal, token = await tenants.create_token(
            uow, tenant_slug=accepted.tenant_slug, email=accepted.email, role=accepted.role
        )
        await invitations.record_acceptance(uow, accepted.invitation_id, principal.user.id)
        uow.nudge("member.updated", principal.user.id, tenant_id=principal.tenant.id)
    return AcceptInvitationPayload(token=token, viewer=Viewer.of(principal))
