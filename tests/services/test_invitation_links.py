"""One working link per address (issue 39): a new invitation voids the older links, an accepted
one voids the others, a member is refused, and the accept page can check a code before anyone
clicks (`invitationCode`). Sending is done here as the `email.invitation.v1` job does it
(`take_pending`, then SENT), so the codes are the ones an email would carry."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from outlive.db.models import InvitationStatus
from outlive.db.tx import Sessions
from outlive.ids import InvitationId
from outlive.services import invitations
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, Servers, TenantHandle

INVITE = "mutation($e: String!, $r: Role) { inviteMember(email: $e, role: $r) { id role status } }"
RESEND = "mutation($id: ID!) { resendInvitation(id: $id) { id status } }"
ACCEPT = "mutation($c: String!) { acceptInvitation(code: $c) { token viewer { role } } }"
CHECK = "query($c: String!) { invitationCode(code: $c) { valid reason tenantName email role } }"
STATUSES = "{ invitations { id status } }"


async def send(sessions: Sessions, tenant: TenantHandle, invitation_id: str) -> str:
    """What the job does: a fresh code, then SENT. The code its email would carry."""
    async with sessions.unit(tenant.id) as uow:
        outgoing = await invitations.take_pending(uow, InvitationId(_uuid(invitation_id)))
        assert outgoing is not None
        await invitations.finish(uow, outgoing.id, status=InvitationStatus.SENT, dispatch=False)
    return outgoing.token


def _uuid(value: str) -> UUID:
    return UUID(value)


async def invite(api: Api, tenant: TenantHandle, email: str, role: str = "OPERATOR") -> str:
    data = await api.gql(INVITE, {"e": email, "r": role}, token=tenant.token)
    invited: str = data["inviteMember"]["id"]
    return invited


async def refusal(api: Api, code: str) -> str:
    body = (await api.post(ACCEPT, {"c": code}, token=None)).json()
    (error,) = body["errors"]
    return str(error["extensions"]["reason"])


async def statuses(api: Api, tenant: TenantHandle) -> dict[str, str]:
    listed = (await api.gql(STATUSES, token=tenant.token))["invitations"]
    return {i["id"]: i["status"] for i in listed}


async def test_a_new_invitation_voids_the_older_link(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    first = await invite(api, tenant, "ann@links.test")
    old_code = await send(sessions, tenant, first)
    second = await invite(api, tenant, "ann@links.test", "VIEWER")
    new_code = await send(sessions, tenant, second)

    assert await statuses(api, tenant) == {first: "REVOKED", second: "SENT"}
    assert await refusal(api, old_code) == "revoked"
    accepted = (await api.post(ACCEPT, {"c": new_code}, token=None)).json()["data"]
    assert accepted["acceptInvitation"]["viewer"]["role"] == "VIEWER"  # the invitation's role


async def test_an_unsent_invitation_of_the_same_role_is_handed_back(
    api: Api, tenant: TenantHandle
) -> None:
    first = await invite(api, tenant, "bo@links.test")
    again = await invite(api, tenant, "bo@links.test")  # no second email
    other_role = await invite(api, tenant, "bo@links.test", "ADMIN")

    assert again == first
    assert await statuses(api, tenant) == {first: "REVOKED", other_role: "PENDING"}


async def test_an_accepted_invitation_voids_the_other_links(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    first = await invite(api, tenant, "cy@links.test")
    await send(sessions, tenant, first)
    second = await invite(api, tenant, "cy@links.test")
    second_code = await send(sessions, tenant, second)
    await api.gql(RESEND, {"id": first}, token=tenant.token)  # the first is live again...
    first_code = await send(sessions, tenant, first)
    assert (await statuses(api, tenant))[second] == "REVOKED"  # ...and the second is not

    await api.post(ACCEPT, {"c": first_code}, token=None)
    assert await refusal(api, second_code) == "revoked"
    assert await refusal(api, first_code) == "accepted"


async def test_a_member_is_refused_with_a_reason(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    with pytest.raises(GraphQLError) as refused:
        await invite(api, tenant, tenant.principal.user.email)
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert "member of this tenant already" in refused.value.errors[0]["message"]

    invited = await invite(api, tenant, "dee@links.test")
    code = await send(sessions, tenant, invited)
    await api.post(ACCEPT, {"c": code}, token=None)
    with pytest.raises(GraphQLError):  # now a member: inviting again is refused too
        await invite(api, tenant, "dee@links.test")


async def test_the_accept_page_learns_what_a_code_would_do_before_the_click(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    invited = await invite(api, tenant, "eve@links.test", "VIEWER")
    code = await send(sessions, tenant, invited)

    async def check(c: str) -> dict[str, Any]:
        response = await api.post(CHECK, {"c": c}, token=None)  # no bearer token needed
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()["data"]["invitationCode"]
        return found

    assert await check(code) == {
        "valid": True,
        "reason": None,
        "tenantName": tenant.principal.tenant.name,
        "email": "eve@links.test",
        "role": "VIEWER",
    }
    assert (await check(code))["valid"]  # checking changes nothing
    assert (await check(code[:-3]))["reason"] == "unknown"
    await api.post(ACCEPT, {"c": code}, token=None)
    used = await check(code)
    assert (used["valid"], used["reason"], used["email"]) == (False, "accepted", None)

    other = await invite(api, tenant, "fay@links.test")
    other_code = await send(sessions, tenant, other)
    await api.gql(
        "mutation($id: ID!) { revokeInvitation(id: $id) { id } }", {"id": other}, token=tenant.token
    )
    assert (await check(other_code))["reason"] == "revoked"
    # a token-less request may ask nothing else
    mixed = await api.post(
        "query($c: String!) { invitationCode(code: $c) { valid } runs { edges { cursor } } }",
        {"c": code},
        token=None,
    )
    assert mixed.status_code == 401


async def test_a_resend_counts_against_the_recipient_s_limit(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    async with Api.running(make_settings(servers, rate_invite_recipient="2/3600")) as api:
        invited = await invite(api, tenant, "gil@links.test")  # one email to gil
        await send(sessions, tenant, invited)
        await api.gql(RESEND, {"id": invited}, token=tenant.token)  # two
        await send(sessions, tenant, invited)
        body = (await api.post(RESEND, {"id": invited}, token=tenant.token)).json()

        assert body["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        assert (await statuses(api, tenant))[invited] == "SENT"  # nothing changed
