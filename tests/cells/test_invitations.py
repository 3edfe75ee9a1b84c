"""`acceptInvitation` carries no bearer token: an invitation code names its tenant
(`naming_secret`), so the API takes it on the tenant's cell; a code sent before codes named
their tenant is asked of every cell (docs/cells.md)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from sqlalchemy import text

from outlive.db.models import InvitationStatus, Role
from outlive.ids import InvitationId, TenantId
from outlive.services import invitations
from outlive.services.tenants import token_tenant
from tests.cells.conftest import TwoCells, served, tenant_on
from tests.support import Api

ACCEPT = (
    "mutation($c: String!) { acceptInvitation(code: $c) {"
    " token viewer { user { email } tenant { slug } } } }"
)


async def sent(two_cells: TwoCells, cell: str, tenant_id: TenantId, email: str) -> str:
    """An invitation of the tenant, sent: its emailed code."""
    sessions = two_cells.sessions[cell]
    async with sessions.unit(tenant_id) as uow:
        record = await invitations.invite(uow, email=email, role=Role.VIEWER)
    async with sessions.unit() as uow:
        outgoing = await invitations.take_pending(uow, InvitationId(record.id))
        assert outgoing is not None
        await invitations.finish(
            uow, InvitationId(record.id), status=InvitationStatus.SENT, dispatch=False
        )
    return outgoing.token


async def accept(api: Api, code: str) -> dict[str, Any]:
    response = await api.post(ACCEPT, {"c": code}, token=None)
    body = response.json()
    assert not body.get("errors"), body
    accepted: dict[str, Any] = body["data"]["acceptInvitation"]
    return accepted


async def test_an_invitation_of_another_cell_is_accepted_there(two_cells: TwoCells) -> None:
    tenant_id, _, slug = await tenant_on(two_cells, "b")
    code = await sent(two_cells, "b", tenant_id, "new@example.test")
    assert token_tenant(code) == tenant_id  # the code names its tenant
    old = await sent(two_cells, "b", tenant_id, "old@example.test")
    old_code = secrets.token_urlsafe(32)  # as sent before codes named their tenant
    async with two_cells.sessions["b"].unit() as uow:
        await uow.session.execute(
            text("UPDATE invitations SET token_hash = :h WHERE token_hash = :was"),
            {
                "h": hashlib.sha256(old_code.encode()).digest(),
                "was": hashlib.sha256(old.encode()).digest(),
            },
        )
    async with served(two_cells) as client:
        api = Api(client)
        for code_, email in ((code, "new@example.test"), (old_code, "old@example.test")):
            accepted = await accept(api, code_)
            assert accepted["viewer"]["tenant"]["slug"] == slug
            assert accepted["viewer"]["user"]["email"] == email
            viewer = await api.gql("{ viewer { tenant { slug } } }", token=accepted["token"])
            assert viewer["viewer"]["tenant"]["slug"] == slug  # its new token works, on b
    members = await two_cells.sessions["b"].all(
        text("SELECT email FROM users WHERE tenant_id = :t ORDER BY email"), t=tenant_id
    )
    assert {"new@example.test", "old@example.test"} <= {m["email"] for m in members}
