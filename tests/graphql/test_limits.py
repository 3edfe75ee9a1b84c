"""What one request may ask for: a cost cap, a body size counted as it arrives, no NUL bytes and
no deep JSON, each refused with the contract's JSON error and nothing written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from outlive.config import Settings
from outlive.db.engine import create_engine
from outlive.db.models import Invitation, Run, WebhookEndpoint
from outlive.db.tx import Sessions
from outlive.graphql.limits import cost_plan
from outlive.resolvers.schema import build_schema
from tests.conftest import make_settings
from tests.support import Api, Servers, TenantHandle

RUN_PAGE = "{ runs(first: 100) { edges { node { id %s } } } }"


def _aliases(count: int, first: int = 1000) -> str:
    return " ".join(f"e{i}: events(first: {first}) {{ seq }}" for i in range(count))


async def _rows(sessions: Sessions, model: Any) -> int:
    found = await sessions.one(select(func.count().label("n")).select_from(model))
    return int(found["n"]) if found is not None else 0


def test_the_cost_multiplies_the_first_values_along_each_path() -> None:
    schema = build_schema()._schema
    query = RUN_PAGE % "events(first: 1000) { seq }"
    from graphql import parse

    plan = cost_plan(schema, parse(query), None)
    assert plan.cost(None, 50) == 100 + 100 + 100 + 100 * 1000  # runs, edges, node, events
    by_variable = "query($n: Int) { runs(first: $n) { edges { node { id } } } }"
    plan = cost_plan(schema, parse(by_variable), None)
    assert plan.cost({"n": 7}, 50) == 3 * 7
    assert plan.cost({}, 50) == 3 * 20  # the argument's default
    endpoints = "{ webhookEndpoints { deliveries(first: 100) { id } } }"
    assert cost_plan(schema, parse(endpoints), None).cost(None, 50) == 50 + 50 * 100
    tree = "{ runs(first: 10) { edges { node { ancestors { childCounts { count } } } } } }"
    # a tree is at most 8 runs above a run, and a run's children have at most 6 statuses
    assert cost_plan(schema, parse(tree), None).cost(None, 50) == 30 + 10 * 8 + 10 * 8 * 6


async def test_a_query_asking_for_millions_of_rows_is_refused_before_it_runs(
    api: Api, tenant: TenantHandle
) -> None:
    response = await api.post(RUN_PAGE % _aliases(29), token=tenant.token)
    assert response.status_code == 200
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "2900300 objects" in error["message"]
    assert "limit of 20000" in error["message"]
    assert response.json()["data"] is None


async def test_the_cost_counts_variables_too(api: Api, tenant: TenantHandle) -> None:
    query = "query($n: Int, $m: Int) { runs(first: $n) { edges { node { events(first: $m) { seq } } } } }"  # noqa: E501
    refused = await api.post(query, {"n": 100, "m": 1000}, token=tenant.token)
    assert refused.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    allowed = await api.gql(query, {"n": 20, "m": 100}, token=tenant.token)
    assert allowed["runs"]["edges"] == []


@pytest.mark.parametrize(
    "query",
    [
        RUN_PAGE % "events(first: 100) { seq }",  # the runs screen at its largest page
        '{ run(id: "00000000-0000-0000-0000-000000000000") { events(first: 1000) { seq } } }',
        "{ webhookEndpoints { id deliveries(first: 100) { id } } invitations { id } }",
        "{ usage(days: 366) { day count } agents { name } viewer { user { email } } }",
    ],
)
async def test_what_the_web_app_asks_for_stays_under_the_limit(
    api: Api, tenant: TenantHandle, query: str
) -> None:
    await api.gql(query, token=tenant.token)


async def test_a_chunked_body_over_the_limit_is_413_whatever_the_headers_say(
    api: Api, tenant: TenantHandle
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"query": "{ viewer { user { email } } }", "variables": {"x": "'
        for _ in range(64):
            yield b"x" * 32_768  # 2 MiB in all, with no Content-Length
        yield b'"}}'

    response = await api.client.post(
        "/graphql",
        content=chunks(),
        headers={"Authorization": f"Bearer {tenant.token}", "Content-Type": "application/json"},
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_body_under_the_limit_still_arrives_whole(api: Api, tenant: TenantHandle) -> None:
    body = json.dumps({"query": "{ viewer { user { email } } }", "variables": {"x": "y" * 500_000}})

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 10_000):
            yield body[i : i + 10_000].encode()

    response = await api.client.post(
        "/graphql",
        content=chunks(),
        headers={"Authorization": f"Bearer {tenant.token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["viewer"]["user"]["email"] == tenant.principal.user.email


async def test_deeply_nested_json_is_a_400_with_the_contracts_error(
    api: Api, tenant: TenantHandle
) -> None:
    body = '{"query": "{ viewer { user { email } } }", "variables": {"x": ' + "[" * 100_000
    response = await api.client.post(
        "/graphql",
        content=body,
        headers={"Authorization": f"Bearer {tenant.token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"


async def test_variables_nested_past_the_limit_are_bad_user_input(
    api: Api, tenant: TenantHandle, sessions: Sessions
) -> None:
    nested: Any = "deep"
    for _ in range(200):
        nested = [nested]
    before = await _rows(sessions, Run)
    response = await api.post(
        "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }",
        {"i": {"agent": "llm", "input": {"prompt": "hi", "extra": nested}}},
        token=tenant.token,
    )
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "nest deeper than 64" in error["message"]
    assert await _rows(sessions, Run) == before


NUL = "\x00"


@pytest.mark.parametrize(
    ("query", "variables", "model"),
    [
        ("mutation($e: String!) { inviteMember(email: $e) { id } }", {"e": f"a{NUL}@b.test"},
         Invitation),
        ('mutation { inviteMember(email: "a\\u0000@b.test") { id } }', None, Invitation),
        ("mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }",
         {"i": {"agent": "llm", "input": {"prompt": f"hi{NUL}"}}}, Run),
        ('mutation { startRun(input: {agent: "llm", input: {prompt: "a\\u0000"}}) { run { id } } }',
         None, Run),
        ("mutation($u: String!) { createWebhookEndpoint(url: $u) { secret } }",
         {"u": f"https://example.com/{NUL}"}, WebhookEndpoint),
        ('{ runs(agent: "demo\\u0000") { edges { cursor } } }', None, Run),
        ("query($a: String) { runs(agent: $a) { edges { cursor } } }", {"a": NUL}, Run),
    ],
)  # fmt: skip
async def test_a_nul_byte_anywhere_is_bad_user_input_and_writes_nothing(
    api: Api,
    tenant: TenantHandle,
    sessions: Sessions,
    query: str,
    variables: dict[str, Any] | None,
    model: Any,
) -> None:
    before = await _rows(sessions, model)
    response = await api.post(query, variables, token=tenant.token)
    assert response.status_code == 200
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert "NUL" in error["message"]
    assert await _rows(sessions, model) == before


async def test_database_errors_never_carry_their_parameters(settings: Settings) -> None:
    """A failing statement's message (which a traceback logs) must not list what was bound
    beside the culprit: in the report, a fresh `whsec_` secret next to a NUL-carrying URL."""
    engine = create_engine(settings.database_url or "")
    try:
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError, match="division by zero") as caught:
                await conn.execute(
                    text("SELECT CAST(:secret AS text), 1 / :zero"),
                    {"secret": "whsec_x", "zero": 0},
                )
    finally:
        await engine.dispose()
    assert "whsec_x" not in str(caught.value)


async def test_the_document_limits_come_from_the_settings(
    servers: Servers, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, max_query_depth=3, max_query_aliases=1, max_query_tokens=100)
    async with Api.running(settings) as api:
        for query in (
            "{ runs { edges { node { events { seq } } } } }",  # depth 5
            "{ a: viewer { user { id } } b: viewer { user { id } } }",  # 2 aliases
            "{ viewer { user { " + "id " * 120 + "} } }",  # over 100 tokens
        ):
            response = await api.post(query, token=tenant.token)
            (error,) = response.json()["errors"]
            assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED", (query, error)
        assert await api.gql("{ viewer { user { id } } }", token=tenant.token)
