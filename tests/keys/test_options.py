"""startRun's options beside the strategy: validation, tags and key filters, idempotency keys,
the per-tenant cap with keys, and an agent's declared defaults."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.keys.support import read, rows, start
from tests.support import Api, GraphQLError, Servers, TenantHandle

LONG = {"turns": 1, "delayMs": 600_000}


async def _count(sessions: Sessions, tenant: TenantHandle) -> int:
    found = await rows(sessions, "SELECT count(*) AS n FROM runs WHERE tenant_id = :t", t=tenant.id)
    return int(found[0]["n"])


@pytest.mark.parametrize(
    "options",
    [
        {"key": ""},
        {"key": "k" * 201},
        {"tags": [f"t{i}" for i in range(11)]},
        {"tags": ["has space"]},
        {"tags": [""]},
        {"tags": ["x" * 65]},
        {"idempotencyKey": ""},
        {"idempotencyKey": "i" * 201},
        # issue 39, I3: what forges a log line or reorders what a person reads
        {"key": 'a\r\n{"level":"ERROR"}'},
        {"key": "user\u202egnp.exe"},  # RIGHT-TO-LEFT OVERRIDE
        {"key": "a\u2066b"},  # LEFT-TO-RIGHT ISOLATE
        {"key": "a\u200db"},  # ZERO WIDTH JOINER
        {"key": "a\x00b"},
        {"key": "a\u2028b"},  # LINE SEPARATOR
        {"idempotencyKey": "req\n1"},
    ],
)
async def test_bad_options_are_refused_before_anything_is_written(
    api: Api, tenant: TenantHandle, sessions: Sessions, options: dict[str, Any]
) -> None:
    with pytest.raises(GraphQLError) as refused:
        await start(api, tenant.token, LONG, **options)
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert await _count(sessions, tenant) == 0


async def _page(api: Api, token: str, **filters: Any) -> list[str]:
    data = await api.gql(
        """query($key: String, $tags: [String!]) {
             runs(first: 100, key: $key, tags: $tags) { edges { node { id } } } }""",
        filters,
        token=token,
    )
    return [e["node"]["id"] for e in data["runs"]["edges"]]


async def test_runs_filter_by_key_and_by_all_of_their_tags(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    a = await start(api, tenant.token, LONG, key="a", tags=["env:prod", "team@x"])
    b = await start(api, tenant.token, LONG, key="b", tags=["env:prod"])
    c = await start(api, tenant.token, LONG, tags=["team@x", "v1.2/beta-x_y"])
    theirs = await start(api, other_tenant.token, LONG, key="a", tags=["env:prod", "team@x"])
    ids = {name: r["run"]["id"] for name, r in {"a": a, "b": b, "c": c}.items()}
    assert a["run"]["tags"] == ["env:prod", "team@x"]
    assert await _page(api, tenant.token, key="a") == [ids["a"]]
    assert await _page(api, tenant.token, key="") == [ids["c"]]
    assert await _page(api, tenant.token, tags=["env:prod"]) == [ids["b"], ids["a"]]
    assert await _page(api, tenant.token, tags=["env:prod", "team@x"]) == [ids["a"]]
    assert await _page(api, tenant.token, key="b", tags=["team@x"]) == []
    assert theirs["run"]["id"] not in await _page(api, tenant.token, tags=["env:prod"])


async def test_an_idempotency_key_hands_back_its_run_for_24_hours_settled_or_not(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, sessions: Sessions
) -> None:
    first = await start(api, tenant.token, LONG, key="x", idempotencyKey="req-1")
    again = await start(api, tenant.token, LONG, key="x", idempotencyKey="req-1")
    assert (first["created"], again["created"]) == (True, False)
    assert again["run"]["id"] == first["run"]["id"]
    await api.cancel(tenant.token, first["run"]["id"])
    settled = await start(api, tenant.token, LONG, key="x", idempotencyKey="req-1")
    assert settled["created"] is False
    assert settled["run"]["id"] == first["run"]["id"]
    assert settled["run"]["status"] == "CANCELLED"
    theirs = await start(api, other_tenant.token, LONG, idempotencyKey="req-1")
    assert theirs["created"] is True
    await sessions.execute(
        text("UPDATE runs SET created_at = now() - interval '25 hours' WHERE id = :id"),
        id=first["run"]["id"],
    )
    later = await start(api, tenant.token, LONG, key="x", idempotencyKey="req-1")
    assert later["created"] is True
    assert later["run"]["id"] != first["run"]["id"]
    assert await _count(sessions, tenant) == 2


@pytest.mark.parametrize(
    ("agent", "input", "options"),
    [
        ("llm", {"prompt": "p"}, {"key": "x", "tags": ["a", "b"]}),  # another agent
        ("demo", {"turns": 2}, {"key": "x", "tags": ["a", "b"]}),  # another input
        ("demo", LONG, {"key": "y", "tags": ["a", "b"]}),  # another key
        ("demo", LONG, {"key": "x", "tags": ["a"]}),  # other tags
    ],
)
async def test_an_idempotency_key_reused_for_another_request_is_a_conflict(
    api: Api,
    tenant: TenantHandle,
    sessions: Sessions,
    agent: str,
    input: dict[str, Any],
    options: dict[str, Any],
) -> None:
    """Issue 39, I1: the first run is named, nothing is written, and the same request still
    answers that run."""
    first = await start(api, tenant.token, LONG, key="x", tags=["a", "b"], idempotencyKey="k")
    with pytest.raises(GraphQLError) as refused:
        await start(api, tenant.token, input, agent=agent, idempotencyKey="k", **options)
    same = await start(api, tenant.token, LONG, key="x", tags=["b", "a"], idempotencyKey="k")

    (error,) = refused.value.errors
    assert error["extensions"] == {"code": "IDEMPOTENCY_CONFLICT", "runId": first["run"]["id"]}
    assert await _count(sessions, tenant) == 1
    assert (same["created"], same["run"]["id"]) == (False, first["run"]["id"])


async def test_a_tenant_with_a_cap_of_50_runs_50_keys_of_one_agent_at_once(
    api: Api, tenant: TenantHandle, sessions: Sessions
) -> None:
    await sessions.execute(
        text("UPDATE tenants SET max_running_runs = 50 WHERE id = :t"), t=tenant.id
    )
    started = [await start(api, tenant.token, LONG, key=f"user:{i}") for i in range(51)]
    assert all(s["created"] for s in started)
    admitted = await rows(
        sessions,
        "SELECT count(*) AS n FROM runs WHERE tenant_id = :t AND dispatched_at IS NOT NULL",
        t=tenant.id,
    )
    assert admitted[0]["n"] == 50  # the seed's rule allowed 1
    last = await read(api, tenant.token, started[-1]["run"]["id"])
    assert last["waitingReason"].startswith("waiting for a slot")
    await api.cancel(tenant.token, started[0]["run"]["id"])  # a slot frees: the 51st is admitted
    admitted = await rows(
        sessions,
        "SELECT dispatched_at IS NOT NULL AS admitted FROM runs WHERE id = :id",
        id=started[-1]["run"]["id"],
    )
    assert admitted[0]["admitted"] is True


@pytest.fixture
async def keyed_api(servers: Servers, settings: Settings) -> AsyncIterator[Api]:
    keyed = make_settings(servers, agent_modules=["tests.keyed_agents:AGENT"])
    keyed = keyed.model_copy(update={"database_url": settings.database_url})
    async with Api.running(keyed) as api:
        yield api


async def test_an_agent_declares_its_key_and_strategy(keyed_api: Api, tenant: TenantHandle) -> None:
    data = await keyed_api.gql("{ agents { name keyed onConflict } }", token=tenant.token)
    assert {"name": "conversation", "keyed": True, "onConflict": "ENQUEUE"} in data["agents"]
    assert {"name": "demo", "keyed": False, "onConflict": "RETURN_EXISTING"} in data["agents"]
    one = {**LONG, "conversationId": "c1"}
    first = await start(keyed_api, tenant.token, one, agent="conversation")
    second = await start(keyed_api, tenant.token, one, agent="conversation")
    other = await start(
        keyed_api, tenant.token, {**one, "conversationId": "c2"}, agent="conversation"
    )
    assert first["run"]["key"] == "conversation:c1"
    assert second["created"] is True  # ENQUEUE, the agent's default
    assert second["run"]["queuedBehindId"] == first["run"]["id"]
    assert other["run"]["queuedBehindId"] is None
    told = await start(
        keyed_api, tenant.token, one, agent="conversation", key="mine", onConflict="REJECT"
    )
    assert told["run"]["key"] == "mine"
