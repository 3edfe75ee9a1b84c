"""A removed member (issue 39): their HTTP requests answer 401 and their open socket closes with
4403 within a second, on every API process: the socket here is held by one API process and the
member is removed through another, so only the announcement can close it (a changed role rides
the same announcement). A demoted member's socket stays open (every role reads) and their next
mutation is FORBIDDEN."""

from __future__ import annotations

import asyncio

from outlive.config import Settings
from outlive.db.models import Role
from outlive.db.tx import Sessions
from tests.realtime.clients import PLAIN, Served, Socket
from tests.resolvers.test_members import REMOVE, SET_ROLE, START, member
from tests.support import Api, TenantHandle

VIEWER = "{ viewer { role } }"


async def test_a_removed_member_is_refused_and_their_socket_closes_within_a_second(
    served: Served, http: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    user_id, token = await member(sessions, tenant, Role.OPERATOR)
    async with Socket.open(served.url, token=token) as sock:
        await sock.subscribe(PLAIN)
        await sock.sync()
        assert (await http.post(VIEWER, token=token)).status_code == 200  # now in the cache
        async with Api.running(settings) as elsewhere:  # another API process's worth
            loop = asyncio.get_running_loop()
            removed_at = loop.time()
            await elsewhere.gql(REMOVE, {"u": user_id}, token=tenant.token)
            code, _ = await sock.closed(timeout=5)
            closed_after = loop.time() - removed_at
        refused = await http.post(VIEWER, token=token)

    assert code == 4403
    assert closed_after < 1.5  # within a second of the commit (a shared machine: slack)
    assert refused.status_code == 401


async def test_a_demoted_member_keeps_their_socket_and_loses_the_mutation(
    served: Served, http: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    user_id, token = await member(sessions, tenant, Role.OPERATOR)
    assert "errors" not in (await http.post(START, token=token)).json()  # cached as OPERATOR
    async with Socket.open(served.url, token=token) as sock:
        await sock.subscribe(PLAIN)
        await http.gql(SET_ROLE, {"u": user_id, "r": "VIEWER"}, token=tenant.token)
        body = (await http.post(START, token=token)).json()
        nudge = await sock.nudge_where(type="member.updated")  # still open: every role reads

    assert body["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert nudge["id"] == user_id
