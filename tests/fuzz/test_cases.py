"""The fuzzer's findings, R1-R11, as fixed cases: each answer JSON, no 5xx, no ERROR line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from outlive.app import build_app
from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.telemetry import logs
from outlive.worker import WorkerHost
from tests.fuzz.conftest import Errors, check_answer
from tests.realtime.clients import PLAIN, Served, Socket, serve
from tests.support import Api, NudgeWatch, TenantHandle, settled

pytestmark = pytest.mark.timeout(120)

REPLAY = """mutation($f: ReplayRunsFilter) {
  replayRuns(filter: $f, rate: 5, limit: 10) { id status } }"""


def _auth(tenant: TenantHandle) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.token}", "Content-Type": "application/json"}


async def test_r1_replay_runs_fifteen_times(api: Api, tenant: TenantHandle, errors: Errors) -> None:
    for _ in range(15):
        response = await api.post(REPLAY, {"f": {"status": ["FAILED"]}}, token=tenant.token)
        check_answer(response)


@pytest.mark.parametrize("body", [b"null", b"1.5", b'"x"', b"true"])
async def test_r2_a_body_that_is_not_an_object(
    api: Api, tenant: TenantHandle, errors: Errors, body: bytes
) -> None:
    response = await api.client.post("/graphql", content=body, headers=_auth(tenant))
    check_answer(response)
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_r3_invalid_utf8(api: Api, tenant: TenantHandle, errors: Errors) -> None:
    body = b'{"query": "{ agents { name } }\xff\xfe"}'
    response = await api.client.post("/graphql", content=body, headers=_auth(tenant))
    check_answer(response)
    assert response.status_code == 400


async def test_r4_a_non_string_operation_name(
    api: Api, tenant: TenantHandle, errors: Errors
) -> None:
    body = {"query": "{ agents { name } }", "operationName": 5}
    response = await api.client.post("/graphql", json=body, headers=_auth(tenant))
    check_answer(response)
    assert response.status_code == 400


async def test_r5_a_subscription_over_http(api: Api, tenant: TenantHandle, errors: Errors) -> None:
    body = {"query": "subscription { nudges { type } }"}
    response = await api.client.post("/graphql", json=body, headers=_auth(tenant))
    check_answer(response)
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "WebSocket" in error["message"]


async def test_405_and_a_mutation_over_get_are_json(
    api: Api, tenant: TenantHandle, errors: Errors
) -> None:
    for method in ("PUT", "DELETE", "PATCH"):
        response = await api.client.request(method, "/graphql", headers=_auth(tenant))
        check_answer(response)
        assert response.status_code == 405
    params = {"query": "mutation { __typename }"}
    response = await api.client.get("/graphql", params=params, headers=_auth(tenant))
    check_answer(response)
    assert response.status_code == 400


async def test_r6_a_missing_asset_is_404(settings: Settings, errors: Errors) -> None:
    app = build_app(settings)  # with the web app's routes
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://outlive.test") as c:
            response = await c.get("/assets/x.js")
    assert response.status_code == 404


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[Served]:
    async with serve(settings) as served:
        yield served


@pytest.mark.parametrize("raw", ["null", "1", "[]", '""'])
async def test_r7_a_message_that_is_not_an_object(
    served: Served, tenant: TenantHandle, errors: Errors, raw: str
) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.ws.send(raw)
        assert (await sock.closed())[0] == 4400


@pytest.mark.parametrize("payload", [[], None])
async def test_r8_a_subscribe_payload_that_is_not_an_object(
    served: Served, tenant: TenantHandle, errors: Errors, payload: Any
) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.send({"id": "1", "type": "subscribe", "payload": payload})
        assert (await sock.closed())[0] == 4400


async def test_r9_a_syntax_error_gets_an_error_frame(
    served: Served, tenant: TenantHandle, errors: Errors
) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        query = "subscription { nudges { type } } " + "x" * 300  # a long "Unexpected Name"
        await sock.send({"id": "1", "type": "subscribe", "payload": {"query": query}})
        frame = await sock.receive()
    assert frame["type"] == "error"
    assert frame["payload"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"


async def test_r10_a_duplicate_subscribe_with_a_long_id(
    served: Served, tenant: TenantHandle, errors: Errors
) -> None:
    long_id = "x" * 300
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.subscribe(id=long_id)
        await sock.send({"id": long_id, "type": "subscribe", "payload": {"query": PLAIN}})
        code, reason = await sock.closed()
    assert code == 4409
    assert len(reason.encode()) <= 123


async def test_r11_a_retry_later_logs_no_error(
    api: Api,
    worker: WorkerHost,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    errors: Errors,
) -> None:
    logs.quiet_expected_retries()  # as `outlive worker` does (`logs.setup`)
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(
            tenant.token, "demo", {"turns": 1, "delayMs": 0, "flakyAttempts": 1}
        )
        done = await watch.until(started["run"]["id"], settled)
    assert (done.status, done.attempt) == ("SUCCEEDED", 2)  # a RetryLater, retried once


_FAR = "0001-01-01T00:00:00+01:00"  # before year 1 once in UTC


@pytest.mark.parametrize(
    ("document", "variables"),
    [
        ('mutation { startRun(input: {agent: "demo", input: {turns: 1e999}}) { created } }', None),
        (
            "query($s: DateTime!) { runs(first: 1, createdSince: $s) { edges { node { id } } } }",
            {"s": _FAR},
        ),
        (
            "query($s: DateTime!) { runs(first: 1, createdBefore: $s) { edges { node { id } } } }",
            {"s": "9999-12-31T23:59:59-01:00"},
        ),
        ("mutation($s: DateTime!) { replayRuns(filter: {since: $s}) { id } }", {"s": _FAR}),
        (
            "query($a: String!) { runs(first: 1, after: $a) { edges { node { id } } } }",
            {"a": "MDAwMS0wMS0wMVQwMDowMDowMCswMTowMHx4"},
        ),
    ],
)
async def test_round4_l1_values_out_of_range(
    api: Api, tenant: TenantHandle, errors: Errors, document: str, variables: Any
) -> None:
    """Security review round 4, L1: each was a 500 with an ERROR carrying the value's repr."""
    response = await api.post(document, variables, token=tenant.token)
    check_answer(response)
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
