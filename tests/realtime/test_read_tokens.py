"""Run read tokens (`createRunReadToken`): read one run, its events, steps and `runOutput`, and
nothing else; never write; stop at expiry and within a second of their parent's revocation."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from outlive.cli.tokens import revoke_token
from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services.tenants import create_token
from tests.realtime.clients import Served, Socket
from tests.realtime.test_outputs import read_all, subscribe_output, text_of
from tests.support import Api, GraphQLError, TenantHandle

MINT = "mutation($id: ID!, $ttl: Int) { createRunReadToken(id: $id, ttlSeconds: $ttl) }"
RUN = "query($id: ID!) { run(id: $id) { id status events { seq type } steps { name } } }"


async def mint(http: Api, token: str, run_id: str, ttl: int | None = None) -> str:
    data = await http.gql(MINT, {"id": run_id, "ttl": ttl}, token=token)
    minted: str = data["createRunReadToken"]
    return minted


async def demo(http: Api, token: str, **extra: Any) -> dict[str, Any]:
    run: dict[str, Any] = (await http.start_run(token, input={"turns": 1, "delayMs": 0, **extra}))[
        "run"
    ]
    return run


async def test_a_read_token_reads_its_run_and_nothing_else(
    served: Served, http: Api, tenant: TenantHandle, worker: Any
) -> None:
    other = await demo(http, tenant.token)  # another run of the tenant, settled first
    async with Socket.open(served.url, token=tenant.token) as sock:
        await subscribe_output(sock, other["id"])
        await read_all(sock)  # completes once it settled
    mine = await demo(http, tenant.token, streamChars=40, streamDelayMs=0)
    reader = await mint(http, tenant.token, mine["id"])

    async with Socket.open(served.url, token=reader) as sock:  # its runOutput, to the end
        await subscribe_output(sock, mine["id"])
        chunks = await read_all(sock)
    read = (await http.gql(RUN, {"id": mine["id"]}, token=reader))["run"]
    elsewhere = await http.gql(
        "query($id: ID!) { run(id: $id) { id } runs { edges { node { id } } }"
        " webhookEndpoints { id } invitations { id } agents { name } }",
        {"id": other["id"]},
        token=reader,
    )
    with_tenant = await http.gql("{ runs { edges { node { id } } } }", token=tenant.token)

    assert text_of(chunks).startswith("turn 1: ")
    assert read["id"] == mine["id"]
    assert read["status"] == "SUCCEEDED"
    assert [e["type"] for e in read["events"]][-1] == "succeeded"
    assert read["steps"] == [{"name": "turn"}]
    assert elsewhere == {
        "run": None,
        "runs": {"edges": []},
        "webhookEndpoints": [],
        "invitations": [],
        "agents": [],
    }
    assert len(with_tenant["runs"]["edges"]) == 2  # the same read with the tenant's token


async def test_a_read_token_changes_nothing(
    http: Api, tenant: TenantHandle, sessions: Sessions
) -> None:
    run = await demo(http, tenant.token, awaitSignal="go")
    reader = await mint(http, tenant.token, run["id"])
    attempts = [
        ("mutation($id: ID!) { cancelRun(id: $id) { id } }", {"id": run["id"]}),
        (
            "mutation($i: StartRunInput!) { startRun(input: $i) { created } }",
            {"i": {"agent": "demo"}},
        ),
        ("mutation($id: ID!) { createRunReadToken(id: $id) }", {"id": run["id"]}),
        (
            "mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted } }",
            {"i": {"id": run["id"], "name": "go"}},
        ),
    ]
    answers = [await http.post(q, v, token=reader) for q, v in attempts]
    after = await http.run(tenant.token, run["id"])

    for answer in answers:
        assert answer.status_code == 401, answer.text
        assert answer.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert after is not None
    assert after["cancelRequestedAt"] is None
    assert after["status"] in ("QUEUED", "RUNNING", "WAITING")


async def test_another_tenants_run_cannot_be_given_a_read_token(
    http: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    run = await demo(http, tenant.token)
    with pytest.raises(GraphQLError) as refused:
        await mint(http, other_tenant.token, run["id"])

    assert refused.value.codes == ["NOT_FOUND"]


async def test_a_read_token_stops_at_its_expiry(http: Api, tenant: TenantHandle) -> None:
    run = await demo(http, tenant.token)
    reader = await mint(http, tenant.token, run["id"], ttl=1)
    before = await http.post(RUN, {"id": run["id"]}, token=reader)
    await asyncio.sleep(1.5)  # the token's own lifetime is the thing under test
    after = await http.post(RUN, {"id": run["id"]}, token=reader)

    assert before.status_code == 200
    assert after.status_code == 401
    assert json.loads(after.text)["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_a_read_token_dies_within_a_second_with_the_token_that_made_it(
    served: Served, http: Api, tenant: TenantHandle, sessions: Sessions, settings: Settings
) -> None:
    async with sessions.unit() as uow:  # a second token of the tenant, to revoke
        parent, parent_token = await create_token(
            uow,
            tenant_slug=tenant.principal.tenant.slug,
            email=tenant.principal.user.email,
            expires_in=timedelta(hours=1),
        )
    run = await demo(http, tenant.token, awaitSignal="never")
    reader = await mint(http, parent_token, run["id"])
    async with Socket.open(served.url, token=reader) as sock:
        await subscribe_output(sock, run["id"])
        await sock.sync()
        assert (await http.post(RUN, {"id": run["id"]}, token=reader)).status_code == 200
        loop = asyncio.get_running_loop()
        revoked_at = loop.time()
        await revoke_token(settings, str(parent.token_id))
        code, _ = await sock.closed(timeout=5)
        closed_after = loop.time() - revoked_at
    refused = await http.post(RUN, {"id": run["id"]}, token=reader)

    assert code == 4403
    assert closed_after < 1.5  # within a second of the announcement (shared machine: slack)
    assert refused.status_code == 401
