"""Accepting an invitation with the code its email carries (no bearer token), revoking and
resending it, through a real SMTP server on loopback and a real worker."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import text

from outlive.db.tx import Sessions
from tests.jobs.test_invitations import INVITE, Inbox, smtp  # noqa: F401 (the fixture)
from tests.support import Api, NudgeWatch, TenantHandle

ACCEPT = (
    "mutation($c: String!) { acceptInvitation(code: $c) {"
    " token viewer { user { email } tenant { slug } } } }"
)
LIST = "{ invitations { id email status expiresAt acceptedAt } }"
REVOKE = "mutation($id: ID!) { revokeInvitation(id: $id) { id status } }"
RESEND = "mutation($id: ID!) { resendInvitation(id: $id) { id status } }"
VIEWER = "{ viewer { user { email } tenant { slug } } }"


def code_in(inbox: Inbox, n: int) -> str:
    """The code in the n-th email's link."""
    body = inbox.messages[n][1].get_payload(decode=True).decode()
    found = re.search(r"#invitation=([^&\s]+)&tenant=[^&\s]+&email=([^&\s]+)", body)
    assert found is not None, body
    assert found.group(2) == inbox.messages[n][0][0].replace("@", "%40")
    return found.group(1)


async def _status_is(api: Api, watch: NudgeWatch, token: str, status: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = (await api.gql(LIST, token=token))["invitations"]
        return found[0] if found and found[0]["status"] == status else None

    return await watch.until_true(check, 30, f"the invitation {status}")


async def _refusal(api: Api, code: str) -> str:
    response = await api.post(ACCEPT, {"c": code}, token=None)
    assert response.status_code == 200
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    return str(error["extensions"]["reason"])


async def test_the_emailed_code_signs_the_invitee_in_once(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    smtp: Any,  # noqa: F811
) -> None:
    inbox, port = smtp
    async with (
        jobs_world(smtp_url=f"smtp://127.0.0.1:{port}") as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        await api.gql(INVITE, {"e": "ada@example.com"}, token=tenant.token)
        await _status_is(api, watch, tenant.token, "SENT")
        code = code_in(inbox, 0)
        before = len(watch.seen)
        # no Authorization header at all: the code is the credential
        response = await api.post(ACCEPT, {"c": code}, token=None)
        assert response.status_code == 200, response.text
        accepted = response.json()["data"]["acceptInvitation"]
        assert accepted["viewer"] == {
            "user": {"email": "ada@example.com"},
            "tenant": {"slug": tenant.principal.tenant.slug},
        }
        # the new token is a bearer token of the invitee, in the inviting tenant
        assert (await api.gql(VIEWER, token=accepted["token"]))["viewer"] == accepted["viewer"]
        row = await _status_is(api, watch, tenant.token, "ACCEPTED")
        assert row["acceptedAt"]

        async def nudged() -> bool | None:
            return any(n["id"] == row["id"] for n in watch.seen[before:]) or None

        await watch.until_true(nudged, 10, "the acceptance's invitation.updated nudge")
        assert await _refusal(api, code) == "accepted"  # single use
        assert await _refusal(api, code[:-2]) == "unknown"
        revoke = await api.post(REVOKE, {"id": row["id"]}, token=tenant.token)
        assert revoke.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_revoked_expired_and_resent_codes(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    smtp: Any,  # noqa: F811
) -> None:
    inbox, port = smtp
    async with (
        jobs_world(smtp_url=f"smtp://127.0.0.1:{port}") as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        invited = await api.gql(INVITE, {"e": "bob@example.com"}, token=tenant.token)
        invitation_id = invited["inviteMember"]["id"]
        await _status_is(api, watch, tenant.token, "SENT")
        first = code_in(inbox, 0)
        revoked = await api.gql(REVOKE, {"id": invitation_id}, token=tenant.token)
        assert revoked["revokeInvitation"]["status"] == "REVOKED"
        assert await _refusal(api, first) == "revoked"

        resent = await api.gql(RESEND, {"id": invitation_id}, token=tenant.token)
        assert resent["resendInvitation"] == {"id": invitation_id, "status": "PENDING"}
        await _status_is(api, watch, tenant.token, "SENT")
        second = code_in(inbox, 1)
        assert second != first
        assert await _refusal(api, first) == "unknown"  # a resend draws a new code

        async with sessions.unit() as uow:
            await uow.session.execute(
                text("UPDATE invitations SET expires_at = now() WHERE id = :id"),
                {"id": invitation_id},
            )
        assert await _refusal(api, second) == "expired"
        # another tenant cannot see, revoke or resend it
        other = await api.post(REVOKE, {"id": invitation_id}, token=None)
        assert other.status_code == 401


async def test_without_a_token_only_accept_invitation_is_served(api: Api) -> None:
    for query in (
        VIEWER,
        'mutation { acceptInvitation(code: "x") { token } __typename }',
        'mutation { acceptInvitation(code: "x") { token } cancelRun(id: "1") { id } }',
        "query { viewer { user { email } } } # acceptInvitation",
        'mutation { ...F } fragment F on Mutation { acceptInvitation(code: "x") { token } }',
    ):
        response = await api.post(query, token=None)
        assert response.status_code == 401, (query, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    # a token that does not work is refused as before, even for acceptInvitation
    bad = await api.post(ACCEPT, {"c": "x"}, token="olv_nope")
    assert bad.status_code == 401
    got = await api.client.get("/graphql", params={"query": "{ __typename }"})
    assert got.status_code == 401
    assert await _refusal(api, "not-a-code") == "unknown"
