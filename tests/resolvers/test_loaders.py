"""A page of runs asking for their events (or endpoints for their deliveries) is one statement
per page shape, not one per row, and each row still gets its own, tenant-scoped, rows."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import event, text

from outlive.app import build_app
from outlive.config import Settings
from outlive.db import drivers
from outlive.db.tx import Sessions
from tests.support import Api, TenantHandle


@contextlib.asynccontextmanager
async def _api_counting(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Api, list[str]]]:
    """The API in process, with every statement it sends recorded: through its SQLAlchemy
    engine, and on the raw asyncpg pool (the statements still run; they are only noted)."""
    app = build_app(settings, serve_web=False)
    statements: list[str] = []

    def noted(run: Any) -> Any:
        async def send(on: Any, statement: Any, params: Any) -> Any:
            statements.append(statement.sql)
            return await run(on, statement, params)

        return send

    for name in ("raw_one", "raw_all", "raw_execute"):
        monkeypatch.setattr(drivers, name, noted(getattr(drivers, name)))
    async with app.router.lifespan_context(app):

        def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(statement)

        event.listen(app.state.runtime.engine.sync_engine, "before_cursor_execute", record)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://outlive.test") as c:
            yield Api(c), statements


async def _settled_runs(sessions: Sessions, tenant: TenantHandle, count: int) -> None:
    async with sessions.unit() as uow:
        await uow.session.execute(
            text(
                "WITH made AS (INSERT INTO runs (tenant_id, agent, input, status, event_seq)"
                " SELECT :t, 'demo', jsonb_build_object('n', n), 'SUCCEEDED', n"
                " FROM generate_series(1, :count) AS n RETURNING id, event_seq)"
                " INSERT INTO run_events (run_id, seq, type, data)"
                " SELECT id, s, 'turn', jsonb_build_object('turn', s)"
                " FROM made, generate_series(1, made.event_seq) AS s"
            ),
            {"t": tenant.id, "count": count},
        )


async def test_the_events_of_a_page_of_runs_are_one_statement(
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _settled_runs(sessions, tenant, 12)
    await _settled_runs(sessions, other_tenant, 3)
    async with _api_counting(settings, monkeypatch) as (api, statements):
        data = await api.gql(
            """{ runs(first: 20) { edges { node { input
                  all: events { seq }  late: events(after: 2, first: 2) { seq data } } } } }""",
            token=tenant.token,
        )
    nodes = [e["node"] for e in data["runs"]["edges"]]
    assert len(nodes) == 12
    for node in nodes:  # each run its own timeline: n events for input {n}
        n = node["input"]["n"]
        assert [e["seq"] for e in node["all"]] == list(range(1, n + 1))
        assert [e["seq"] for e in node["late"]] == list(range(3, min(n, 4) + 1))
        assert [e["data"]["turn"] for e in node["late"]] == [e["seq"] for e in node["late"]]
    timeline_reads = [s for s in statements if "run_events" in s]
    assert len(timeline_reads) == 2  # one per page shape (the two aliases), not 24


async def test_the_deliveries_of_every_endpoint_are_one_statement(
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with sessions.unit() as uow:
        for owner, count in ((tenant, 6), (other_tenant, 2)):
            await uow.session.execute(
                text(
                    "WITH e AS (INSERT INTO webhook_endpoints (tenant_id, url, secret)"
                    " SELECT :t, 'https://example.com/' || n, 'whsec_x'"
                    " FROM generate_series(1, :count) AS n RETURNING id, url)"
                    " INSERT INTO webhook_deliveries (endpoint_id, tenant_id, event_type, body)"
                    " SELECT e.id, :t, 'run.succeeded', jsonb_build_object('url', e.url)"
                    " FROM e, generate_series(1, 3)"
                ),
                {"t": owner.id, "count": count},
            )
    async with _api_counting(settings, monkeypatch) as (api, statements):
        data = await api.gql(
            "{ webhookEndpoints { url deliveries(first: 2) { eventType status } } }",
            token=tenant.token,
        )
    endpoints = data["webhookEndpoints"]
    assert len(endpoints) == 6
    assert all(len(e["deliveries"]) == 2 for e in endpoints)
    assert len([s for s in statements if "FROM webhook_deliveries" in s]) == 1


async def test_the_tree_of_a_page_of_runs_is_one_statement_each(
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`childCounts` and `ancestors` of every run on a page: one statement each, each run its
    own answer (run n has n settled children; each child's path is its parent)."""
    async with sessions.unit() as uow:
        await uow.session.execute(
            text(
                "WITH made AS (INSERT INTO runs (tenant_id, agent, input, status)"
                " SELECT :t, 'demo', jsonb_build_object('n', n), 'SUCCEEDED'"
                " FROM generate_series(1, 5) AS n RETURNING id, input)"
                " INSERT INTO runs (tenant_id, agent, input, status, parent_id, root_id,"
                " parent_step, depth)"
                " SELECT :t, 'demo', jsonb_build_object('of', made.input->'n'), 'FAILED',"
                " made.id, made.id, 'demo#' || c, 1"
                " FROM made, generate_series(1, (made.input->>'n')::int) AS c"
            ),
            {"t": tenant.id},
        )
    async with _api_counting(settings, monkeypatch) as (api, statements):
        data = await api.gql(
            """{ runs(first: 30) { edges { node { id input parentId
                  childCounts { status count } ancestors { id input } } } } }""",
            token=tenant.token,
        )
    nodes = [e["node"] for e in data["runs"]["edges"]]
    assert len(nodes) == 20
    for node in nodes:
        if node["parentId"] is None:
            assert node["ancestors"] == []
            assert node["childCounts"] == [{"status": "FAILED", "count": node["input"]["n"]}]
        else:
            assert node["childCounts"] == []
            assert [a["id"] for a in node["ancestors"]] == [node["parentId"]]
            assert node["ancestors"][0]["input"]["n"] == node["input"]["of"]
    assert len([s for s in statements if "GROUP BY parent_id, status" in s]) == 1
    assert len([s for s in statements if "WITH RECURSIVE up" in s]) == 1
