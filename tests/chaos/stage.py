"""The stage the process-level chaos tests (budgets, schedules, debounce) share: a PostgreSQL and
a Redis of their own (`tests.faults`: the tests restart, flush and kill them), an API process and
workers (`Fleet`: SIGKILLed and replaced), one tenant token each, and the client's calls
(`gql`, again after a 503 as a client does) and polls (`until`).

    async with staged(tmp_path, workers=2, tenants=["s0", "s1"]) as stage:
        await stage.gql(stage.tokens[0], CREATE, {...})
        await stage.fleet.kill_a_worker(rng)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from outlive.db.engine import create_engine, create_sessions
from outlive.services.tenants import create_token
from tests.chaos.harness import Fleet
from tests.faults import OwnPostgres, OwnRedis

# Fast enough to see a lost worker within a test's seconds, slow enough for two loaded cores.
BASE_ENV = {
    "OUTLIVE_RUN_HEARTBEAT_S": "3",
    "OUTLIVE_RUN_SWEEP_S": "2",
    "OUTLIVE_SHUTDOWN_GRACE_S": "1",
    "OUTLIVE_LOG_FORMAT": "text",
}


@dataclass
class Stage:
    postgres: OwnPostgres
    redis: OwnRedis
    fleet: Fleet
    http: httpx.AsyncClient
    tokens: list[str]
    tenant_ids: list[str]

    async def gql(self, token: str, query: str, variables: dict[str, object]) -> dict[str, object]:
        return await gql(self.http, self.fleet, token, query, variables)


@contextlib.asynccontextmanager
async def staged(
    tmp_path: Path,
    *,
    workers: int,
    tenants: list[str],
    env: Mapping[str, str] | None = None,
    tries: int = 3,
) -> AsyncIterator[Stage]:
    """The servers, the API and `workers` workers (each start tried `tries` times: a loaded
    machine's first start can miss its deadline), and a token for each tenant slug."""
    async with contextlib.AsyncExitStack() as stack:
        postgres = await stack.enter_async_context(OwnPostgres.running())
        redis = OwnRedis(tmp_path / "redis")
        await redis.start()
        stack.push_async_callback(redis.kill)
        fleet = Fleet(
            {"DATABASE_URL": postgres.url, "REDIS_URL": redis.url, **BASE_ENV, **(env or {})},
            tmp_path,
        )
        stack.push_async_callback(fleet.close)
        await fleet.start("api", tries=tries)
        await asyncio.gather(*(fleet.start("worker", tries=tries) for _ in range(workers)))
        engine = create_engine(postgres.url, pool_size=1, max_overflow=0)
        stack.push_async_callback(engine.dispose)
        tokens, tenant_ids = [], []
        for slug in tenants:
            async with create_sessions(engine).unit() as uow:
                principal, token = await create_token(uow, tenant_slug=slug, email=f"o@{slug}.test")
            tokens.append(token)
            tenant_ids.append(str(principal.tenant.id))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        yield Stage(postgres, redis, fleet, http, tokens, tenant_ids)


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


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 240) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"{what} did not happen in {timeout}s"
        await asyncio.sleep(1)  # polling a database other processes write: no event to await
