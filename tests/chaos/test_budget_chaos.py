"""Budgets under chaos (issue 42): `demo` conversations with `usagePerTurn` on 4 worker processes
against one tenant budget, with a worker SIGKILLed every 5 s and one PostgreSQL restart. What
the period records never passes the limit (a `demo` turn records exactly what it reserved, and a
step starts only when the recorded, the reserved and its own fit), no run FAILED, every held run
resumes once the limit is raised, and each `turn` event appears exactly once per run.

The size here is CI's; `OUTLIVE_BUDGET_CHAOS_RUNS=200` (with `_TURNS=8`) is the issue's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import Counter
from pathlib import Path

import asyncpg
import httpx
import pytest

from outlive.db.engine import create_engine, create_sessions
from outlive.services.tenants import create_token
from tests.chaos.harness import Fleet
from tests.faults import OwnPostgres, OwnRedis

pytestmark = pytest.mark.timeout(600)

RUNS = int(os.environ.get("OUTLIVE_BUDGET_CHAOS_RUNS", "80"))
TURNS = int(os.environ.get("OUTLIVE_BUDGET_CHAOS_TURNS", "6"))
PER_TURN = {"inputTokens": 6, "outputTokens": 4}  # 10 tokens a turn
LIMIT = RUNS * TURNS * 10 // 2  # half of what the runs would spend
FAULT_S = 35.0
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
SET = (
    "mutation($l: Int!) { setBudget(input: {scope: TENANT, period: DAY, limitTokens: $l}) { id } }"
)


async def gql(
    http: httpx.AsyncClient, fleet: Fleet, token: str, query: str, variables: dict[str, object]
) -> dict[str, object]:
    """As a client does: again after a 503 or a dropped connection (a worker or PostgreSQL
    is down for a moment), until it is answered."""
    for _ in range(120):
        try:
            response = await http.post(
                f"{fleet.apis[0].url}/graphql",
                json={"query": query, "variables": variables},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.TransportError:
            await asyncio.sleep(0.5)
            continue
        body = response.json()
        if response.status_code == 503 or any(
            e.get("extensions", {}).get("code") == "SERVICE_UNAVAILABLE"
            for e in body.get("errors") or []
        ):
            await asyncio.sleep(0.5)
            continue
        assert "errors" not in body, body
        data: dict[str, object] = body["data"]
        return data
    raise AssertionError(f"never answered: {query}")


async def faults(fleet: Fleet, postgres: OwnPostgres, rng: random.Random) -> Counter[str]:
    done: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    end = loop.time() + FAULT_S
    restarted = False
    while loop.time() < end:
        await asyncio.sleep(5)  # the schedule under test: a SIGKILL every 5 s
        if await fleet.kill_a_worker(rng):
            done["worker_kills"] += 1
        if not restarted and loop.time() > end - FAULT_S / 2:
            await postgres.restart()
            restarted, done["postgres_restarts"] = True, 1
    await fleet.replaced()
    return done


async def settled_or_held(url: str, tenant_id: str) -> tuple[int, int, int]:
    """(running or queued, held by the budget, failed) of the tenant's runs."""
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status IN ('QUEUED', 'RUNNING')"
            " OR (status = 'WAITING' AND waiting_for IS DISTINCT FROM 'budget')) AS busy,"
            " count(*) FILTER (WHERE waiting_for = 'budget' AND status = 'WAITING') AS held,"
            " count(*) FILTER (WHERE status = 'FAILED') AS failed FROM runs WHERE tenant_id = $1",
            tenant_id,
        )
    finally:
        await conn.close()
    assert row is not None
    return int(row["busy"]), int(row["held"]), int(row["failed"])


async def until(what: str, check: object, timeout: float = 240) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():  # type: ignore[operator]
        assert loop.time() < deadline, f"{what} did not happen in {timeout}s"
        await asyncio.sleep(1)  # polling a database other processes write: no event to await


async def test_a_budget_holds_under_sigkills_and_a_restart_and_nothing_is_bought_twice(
    tmp_path: Path,
) -> None:
    rng = random.Random(42)
    async with contextlib.AsyncExitStack() as stack:
        postgres = await stack.enter_async_context(OwnPostgres.running())
        redis = OwnRedis(tmp_path / "redis")
        await redis.start()
        stack.push_async_callback(redis.kill)
        env = {
            "DATABASE_URL": postgres.url,
            "REDIS_URL": redis.url,
            "OUTLIVE_RUN_HEARTBEAT_S": "3",
            "OUTLIVE_RUN_SWEEP_S": "2",
            "OUTLIVE_RECONCILE_GRACE_S": "5",
            "OUTLIVE_SHUTDOWN_GRACE_S": "1",
            "OUTLIVE_TENANT_MAX_RUNNING_RUNS": "32",
            "OUTLIVE_LOG_FORMAT": "text",
        }
        fleet = Fleet(env, tmp_path)
        stack.push_async_callback(fleet.close)
        await asyncio.gather(fleet.start("api"), *(fleet.start("worker") for _ in range(4)))
        engine = create_engine(postgres.url, pool_size=1, max_overflow=0)
        stack.push_async_callback(engine.dispose)
        async with create_sessions(engine).unit() as uow:
            principal, token = await create_token(uow, tenant_slug="spend", email="o@spend.test")
        tenant_id = str(principal.tenant.id)
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        await gql(http, fleet, token, SET, {"l": LIMIT})
        for i in range(RUNS):
            input = {"turns": TURNS, "delayMs": 300, "usagePerTurn": PER_TURN}
            options = {"agent": "demo", "key": f"conversation-{i}", "input": input}
            await gql(http, fleet, token, START, {"i": options})
        done = await faults(fleet, postgres, rng)

        async def quiet() -> bool:  # every run settled, or held by the budget
            busy, _, _ = await settled_or_held(postgres.url, tenant_id)
            return busy == 0

        await until("every run settled or held", quiet)
        conn = await asyncpg.connect(postgres.url)
        spent = await conn.fetchval("SELECT coalesce(sum(spent_tokens), 0) FROM budget_periods")
        recorded = await conn.fetchval(
            "SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM run_steps"
        )
        await conn.close()
        _, held, failed = await settled_or_held(postgres.url, tenant_id)
        conn = await asyncpg.connect(postgres.url)
        statuses = Counter(
            f"{r['status']}/{r['waiting_for']}"
            for r in await conn.fetch("SELECT status, waiting_for FROM runs")
        )
        await conn.close()

        await gql(http, fleet, token, SET, {"l": RUNS * TURNS * 10 * 2})  # raised: all may finish

        async def finished() -> bool:
            busy, still_held, _ = await settled_or_held(postgres.url, tenant_id)
            return busy == 0 and still_held == 0

        await until("every held run finished", finished)
        conn = await asyncpg.connect(postgres.url)
        turns = await conn.fetch(
            "SELECT r.id, r.status, array_agg((e.data->>'turn')::int ORDER BY e.seq) AS turns"
            " FROM runs r LEFT JOIN run_events e ON e.run_id = r.id AND e.type = 'turn'"
            " GROUP BY r.id, r.status"
        )
        await conn.close()

    assert done["worker_kills"] >= 5
    assert done["postgres_restarts"] == 1
    assert spent == recorded  # the period's record is its steps' usage, exactly
    assert recorded <= LIMIT  # a demo turn records what it reserved: not one token past it
    assert held > 0, statuses  # the budget held runs (half of what they would spend)
    assert failed == 0
    assert len(turns) == RUNS
    assert all(r["status"] == "SUCCEEDED" for r in turns), Counter(r["status"] for r in turns)
    assert all(list(r["turns"]) == list(range(1, TURNS + 1)) for r in turns)  # each turn once
