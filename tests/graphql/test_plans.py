"""Compiled plans answer exactly what graphql-core's executor answers: every document of the web
app, run both ways on the same data (one app with plans, one without), gives the same JSON (data
and errors)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from outlive.app import build_app
from outlive.config import Settings
from outlive.graphql.http import Pipeline, choose_route
from outlive.graphql.operations import Route
from outlive.graphql.schema import served
from tests.support import TenantHandle

DOCUMENTS = Path(__file__).resolve().parents[2] / "web" / "src" / "api" / "documents"


def _operations() -> list[tuple[str, str, str]]:
    """(file text, operation name, kind) of every operation of the web app's documents."""
    found = []
    for path in sorted(DOCUMENTS.glob("*.graphql")):
        text = path.read_text()
        for kind, name in re.findall(r"^(query|mutation) (\w+)", text, flags=re.MULTILINE):
            found.append((text, name, kind))
    return found


OPERATIONS = _operations()
QUERIES = {name: text for text, name, kind in OPERATIONS if kind == "query"}
MUTATIONS = {name: text for text, name, kind in OPERATIONS if kind == "mutation"}


class Both:
    """Two apps on one database, with compiled plans and without; each operation sent to both."""

    def __init__(
        self, clients: dict[bool, httpx.AsyncClient], settings: Settings, token: str
    ) -> None:
        self.clients, self.token = clients, token
        schema = served(settings)
        self.pipeline = Pipeline(schema.schema, settings, schema.documents)

    async def send(
        self, document: str, name: str, variables: dict[str, Any], *, plans: bool
    ) -> Any:
        body = {"query": document, "operationName": name, "variables": variables}
        headers = {"Authorization": f"Bearer {self.token}"}
        response = await self.clients[plans].post("/graphql", json=body, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    async def same(self, document: str, name: str, variables: dict[str, Any]) -> Any:
        planned = await self.send(document, name, variables, plans=True)
        executed = await self.send(document, name, variables, plans=False)
        assert planned == executed
        return planned

    def planned(self, document: str, name: str) -> bool:
        route, _ = choose_route(self.pipeline, self.pipeline.documents.prepare(document), name)
        return route is Route.PLAN


@pytest.fixture
async def both(settings: Settings, tenant: TenantHandle) -> AsyncIterator[Both]:
    clients: dict[bool, httpx.AsyncClient] = {}
    async with AsyncExitStack() as stack:
        for plans in (True, False):
            app = build_app(settings.model_copy(update={"compiled_plans": plans}), serve_web=False)
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            clients[plans] = await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://outlive.test")
            )
        yield Both(clients, settings.model_copy(update={"compiled_plans": True}), tenant.token)


async def _seed(settings: Settings, tenant: TenantHandle) -> list[str]:
    """Runs in every status, with outputs, errors, unicode and nested JSON, and timestamps."""
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    rows = [
        (
            "SUCCEEDED",
            {"turns": 2, "note": "héllo ✓"},
            {"turns": 2, "deep": [1, 2.5, {"x": None}]},
            None,
        ),
        ("FAILED", {"turns": 1}, None, 'boom: it "failed"\nbadly'),
        ("CANCELLED", {}, None, None),
        ("RUNNING", {"turns": 3}, None, None),
    ]
    ids = []
    for status, input_, output, error in rows:
        ids.append(
            str(
                await conn.fetchval(
                    "INSERT INTO runs (tenant_id, agent, input, output, status, error, started_at,"
                    " finished_at, cancel_requested_at, attempt) VALUES ($1, 'llm', $2::jsonb,"
                    " $3::jsonb, $4::text, $5, now(),"
                    " CASE WHEN $4::text = 'RUNNING' THEN NULL ELSE now() END,"
                    " CASE WHEN $4::text = 'CANCELLED' THEN now() END, 1) RETURNING id",
                    tenant.id,
                    json.dumps(input_),
                    None if output is None else json.dumps(output),
                    status,
                    error,
                )
            )
        )
    await conn.close()
    return ids


async def test_every_query_of_the_web_app_answers_the_same_planned_or_executed(
    both: Both, settings: Settings, tenant: TenantHandle
) -> None:
    ids = await _seed(settings, tenant)
    await both.send(MUTATIONS["StartRun"], "StartRun", {"input": {"agent": "demo"}}, plans=True)
    invite = {"email": "new@example.test"}
    await both.send(MUTATIONS["InviteMember"], "InviteMember", invite, plans=True)
    url = {"url": "http://127.0.0.1:9/hook", "events": None}
    await both.send(MUTATIONS["CreateWebhookEndpoint"], "CreateWebhookEndpoint", url, plans=True)

    first_page = await both.same(QUERIES["Runs"], "Runs", {"first": 2})
    cursor = first_page["data"]["runs"]["pageInfo"]["endCursor"]
    cases: list[tuple[str, dict[str, Any]]] = [
        ("Runs", {"first": 20}),
        ("Runs", {"first": 2, "after": cursor}),
        ("Runs", {"first": 20, "status": ["FAILED", "RUNNING"]}),
        ("Runs", {"first": 1000}),  # BAD_USER_INPUT from the resolver
        ("Runs", {"first": 20, "after": "not a cursor"}),
        ("Runs", {"first": 20, "key": "", "tags": None, "topLevel": True}),
        ("Runs", {"first": 20, "key": None, "tags": ["env:prod"], "topLevel": None}),
        ("KeyHolder", {"agent": "demo", "key": "k", "status": ["QUEUED", "RUNNING"]}),
        ("RunDetail", {"id": ids[0]}),
        ("RunDetail", {"id": ids[1]}),
        ("RunDetail", {"id": "6d2c3b1a-0000-4000-8000-000000000000"}),  # none: null
        ("RunDetail", {"id": "not-a-uuid"}),
        ("RunTimeline", {"id": ids[0], "after": 0}),
        ("Viewer", {}),
        ("Agents", {}),
        ("Usage", {"days": 30}),
        ("Invitations", {}),
        ("WebhookEndpoints", {}),
    ]
    for name, variables in cases:
        await both.same(QUERIES[name], name, variables)
    for name in ("Runs", "KeyHolder", "RunDetail", "Viewer", "Agents", "Usage", "Invitations"):
        assert both.planned(QUERIES[name], name), name
    for name in ("RunTimeline", "WebhookEndpoints"):  # fields with resolvers: executed
        assert not both.planned(QUERIES[name], name), name


async def test_mutations_answer_the_same_planned_or_executed(both: Both) -> None:
    start = MUTATIONS["StartRun"]
    planned = await both.send(start, "StartRun", {"input": {"agent": "demo"}}, plans=True)
    executed = await both.send(start, "StartRun", {"input": {"agent": "demo"}}, plans=False)
    assert planned["data"]["startRun"]["created"] is True
    assert executed["data"]["startRun"]["created"] is False
    assert planned["data"]["startRun"]["run"] == executed["data"]["startRun"]["run"]
    bad = {"input": {"agent": "demo", "input": {"turns": 0}}}
    assert await both.send(start, "StartRun", bad, plans=True) == await both.send(
        start, "StartRun", bad, plans=False
    )
    run_id = planned["data"]["startRun"]["run"]["id"]
    cancel = MUTATIONS["CancelRun"]
    cancelled = await both.send(cancel, "CancelRun", {"id": run_id}, plans=True)
    again = await both.send(cancel, "CancelRun", {"id": run_id}, plans=False)
    assert cancelled == again  # settled: it comes back unchanged
    missing = {"id": "6d2c3b1a-0000-4000-8000-000000000000"}
    assert await both.send(cancel, "CancelRun", missing, plans=True) == await both.send(
        cancel, "CancelRun", missing, plans=False
    )
    assert both.planned(start, "StartRun")


async def test_fragments_aliases_and_typenames_answer_the_same(both: Both) -> None:
    document = """
      query Odd($n: Int!) {
        a: runs(first: $n) { __typename edges { ...E } }
        b: agents { label: name __typename }
        viewer { ... on Viewer { tenant { slug } } user { email } }
      }
      fragment E on RunEdge { node { k: id status } cursor }
    """
    await both.same(document, "Odd", {"n": 3})
    assert both.planned(document, "Odd")
    await both.same(document, "Odd", {"n": "three"})  # variables graphql-core reports
    skip = "query S($s: Boolean!) { agents { name description @skip(if: $s) } }"
    await both.same(skip, "S", {"s": True})
    assert not both.planned(skip, "S")
