"""Bad input: the contract's codes, nothing written, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from outlive.db.models import Run
from outlive.db.tx import Sessions
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from tests.support import Api, TenantHandle


async def _runs_written(sessions: Sessions) -> int:
    found = await sessions.one(select(func.count().label("n")).select_from(Run))
    assert found is not None
    return int(found["n"])


async def _codes(
    api: Api, query: str, variables: dict[str, Any] | None, token: str | None
) -> tuple[int, list[str]]:
    response = await api.post(query, variables, token=token)
    assert response.status_code < 500, response.text
    body = response.json()
    return response.status_code, [e["extensions"]["code"] for e in body.get("errors", [])]


START = "mutation($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"i": {"agent": "nope"}}, "unknown agent 'nope'"),
        ({"i": {"agent": "demo", "input": {"turns": 0}}}, "turns"),
        ({"i": {"agent": "demo", "input": {"turns": "many"}}}, "turns"),
        ({"i": {"agent": "demo", "input": {"delayMs": 600001}}}, "delayMs"),
        ({"i": {"agent": "demo", "input": {"surprise": 1}}}, "surprise"),
        ({"i": {"agent": "demo", "input": [1, 2]}}, "must be a JSON object"),
        ({"i": {"agent": "llm", "input": {}}}, "prompt"),
        ({"i": {"agent": "demo", "input": {"x": "y" * 70_000}}}, "over 65536 bytes"),
    ],
)
async def test_bad_start_input_is_bad_user_input_and_writes_nothing(
    api: Api, tenant: TenantHandle, sessions: Sessions, variables: dict[str, Any], message: str
) -> None:
    before = await _runs_written(sessions)
    response = await api.post(START, variables, token=tenant.token)
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert message in error["message"]
    assert await _runs_written(sessions) == before


@pytest.mark.parametrize(
    "query",
    [
        '{ run(id: "not-a-uuid") { id } }',
        'mutation { cancelRun(id: "42") { id } }',
        '{ runs(after: "%%%") { edges { cursor } } }',
        "{ runs(first: 1000) { edges { cursor } } }",
        '{ run(id: "00000000-0000-0000-0000-000000000000") { events(first: 100000) { seq } } }',
    ],
)
async def test_malformed_ids_cursors_and_sizes_are_bad_user_input(
    api: Api, tenant: TenantHandle, query: str
) -> None:
    status, codes = await _codes(api, query, None, tenant.token)
    assert (status, codes) in ((200, ["BAD_USER_INPUT"]), (200, []))
    if not codes:  # the run does not exist, so its events are never asked for
        assert "events" in query


async def test_cancelling_an_unknown_run_is_not_found(api: Api, tenant: TenantHandle) -> None:
    _status, codes = await _codes(
        api,
        'mutation { cancelRun(id: "00000000-0000-0000-0000-000000000000") { id } }',
        None,
        tenant.token,
    )
    assert codes == ["NOT_FOUND"]


@pytest.mark.parametrize("token", [None, "", "olv_nope", "Bearer", "garbage"])
async def test_a_missing_or_bad_token_is_401_unauthenticated(
    api: Api, token: str | None, sessions: Sessions
) -> None:
    before = await _runs_written(sessions)
    response = await api.post(START, {"i": {"agent": "demo"}}, token=token)
    assert response.status_code == 401
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert await _runs_written(sessions) == before


@pytest.mark.parametrize(
    "query",
    [
        "{ viewer { user { id } ",  # does not parse
        "{ nosuchfield }",
        "{ " + " ".join(f"a{i}: viewer {{ user {{ id }} }}" for i in range(40)) + " }",  # aliases
        "{ viewer { " + "user { id } " * 2000 + "} }",  # tokens
        "query { __schema { types { fields { type { ofType { ofType { ofType { ofType { "
        "ofType { ofType { ofType { name } } } } } } } } } } }",  # depth
    ],
)
async def test_oversized_or_invalid_queries_fail_validation(
    api: Api, tenant: TenantHandle, query: str
) -> None:
    _status, codes = await _codes(api, query, None, tenant.token)
    assert codes
    assert set(codes) == {"GRAPHQL_VALIDATION_FAILED"}


async def test_a_wrong_variable_type_is_bad_user_input(api: Api, tenant: TenantHandle) -> None:
    _, codes = await _codes(
        api, "query($f: Int) { runs(first: $f) { edges { cursor } } }", {"f": "lots"}, tenant.token
    )
    assert codes == ["BAD_USER_INPUT"]


async def test_an_oversized_body_is_refused(api: Api, tenant: TenantHandle) -> None:
    response = await api.post(
        "{ viewer { user { id } } }", {"pad": "x" * 1_100_000}, token=tenant.token
    )
    assert response.status_code == 413


async def test_an_unexpected_error_is_masked(
    api: Api, tenant: TenantHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    from outlive.services import runs as runs_service

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(runs_service, "read_runs", broken)
    response = await api.post("{ runs { edges { cursor } } }", None, token=tenant.token)
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    assert "secret" not in error["message"]


async def test_a_start_with_the_queue_down_answers_queued_and_the_run_says_why_it_waits(
    tenant: TenantHandle, sessions: Sessions, servers: Any
) -> None:
    from tests.conftest import make_settings

    settings = make_settings(servers)
    async with Api.running(settings) as api:
        services = api.client._transport.app.router.routes  # type: ignore[attr-defined]
        assert services
        view = next(r.app for r in services if getattr(r, "path", "") == "/graphql")
        queue = view.services.instances.queue
        await queue.redis.connection_pool.disconnect()
        queue.redis.connection_pool.connection_kwargs["port"] = _closed_port()
        response = await api.post(START, {"i": {"agent": "demo"}}, token=tenant.token)
        assert "errors" not in response.json()  # PostgreSQL alone records the work (contract §3)
        listed = await api.gql(
            "{ runs { edges { node { status error waitingReason } } } }", token=tenant.token
        )
    (edge,) = listed["runs"]["edges"]
    assert edge["node"]["status"] == "QUEUED"
    assert edge["node"]["error"] is None
    assert "queue" in edge["node"]["waitingReason"]
    queue_check = create_queue(settings.redis_url or "", RUNS_QUEUE)
    assert await queue_check.count("queued") == 0
    await queue_check.disconnect()


def _closed_port() -> int:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port
