"""PostgreSQL restarts are ordinary: while it is down the API answers 503 `SERVICE_UNAVAILABLE`
with `retryAfter` (never a 500, never a 401 for a good token), `/readyz` names it, and once it is
back the pools reconnect by themselves: the first request succeeds. A real cluster of the test's
own is SIGKILLed (postmaster and backends) and restarted through crash recovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import text

from outlive.db import drivers
from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from tests.conftest import make_settings, new_tenant
from tests.faults import OwnPostgres, free_port
from tests.realtime.clients import Socket, serve
from tests.support import Api, Servers

START = """mutation($input: StartRunInput!) {
  startRun(input: $input) { created run { id status } } }"""
RUNS = "query { runs(first: 5) { edges { node { id } } } }"
CANCEL = "mutation($id: ID!) { cancelRun(id: $id) { id status } }"
DEMO = {"input": {"agent": "demo", "input": {"turns": 1, "delayMs": 0}}}


@pytest.fixture
async def postgres() -> AsyncIterator[OwnPostgres]:
    async with OwnPostgres.running() as server:
        yield server


@pytest.fixture
async def own_sessions(postgres: OwnPostgres) -> AsyncIterator[Sessions]:
    engine = create_engine(postgres.url)
    yield create_sessions(engine)
    await engine.dispose()


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    body: dict[str, Any] = response.json()
    assert body["data"] is None, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE", body
    assert error["extensions"]["retryAfter"] > 0, body
    assert "Traceback" not in response.text


async def test_the_api_answers_503_while_postgres_is_down_and_recovers_on_its_own(
    servers: Servers, postgres: OwnPostgres, own_sessions: Sessions, caplog: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(drivers, "_outage", drivers._Outage())  # no earlier test's last warning
    settings = make_settings(servers, database_url=postgres.url)
    known, unseen = await new_tenant(own_sessions), await new_tenant(own_sessions)
    async with Api.running(settings) as api:
        before = await api.post(START, DEMO, token=known.token)
        assert before.status_code == 200, before.text  # every pool holds live connections now
        assert (await api.post(RUNS, token=known.token)).status_code == 200

        await postgres.kill()
        assert_unavailable(await api.post(START, DEMO, token=known.token))  # a mutation
        assert_unavailable(await api.post(RUNS, token=known.token))  # a query
        assert_unavailable(await api.post(RUNS, token=unseen.token))  # authentication itself
        # the operator is told why, once (not once per 503), with the driver's own words
        [warning] = [r for r in caplog.records if r.name == "outlive.db.drivers"]
        assert "PostgreSQL cannot be reached" in warning.getMessage()
        assert "Error" in warning.getMessage(), warning.getMessage()
        ready = await api.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["postgres"].startswith("error"), ready.text
        assert ready.json()["redis"] == "ok", ready.text

        await postgres.start()  # crash recovery, then it accepts connections
        after = await api.post(START, DEMO, token=unseen.token)  # the very first request
        assert after.status_code == 200, after.text
        assert after.json()["data"]["startRun"]["created"] is True, after.text
        assert (await api.post(RUNS, token=known.token)).status_code == 200
        assert (await api.client.get("/readyz")).status_code == 200


async def test_a_socket_opened_while_postgres_is_down_is_told_to_try_again(
    servers: Servers, postgres: OwnPostgres, own_sessions: Sessions
) -> None:
    settings = make_settings(servers, database_url=postgres.url)
    tenant = await new_tenant(own_sessions)
    init = {"type": "connection_init", "payload": {"authorization": f"Bearer {tenant.token}"}}
    async with serve(settings) as served:
        await postgres.kill()
        async with Socket.open(served.url) as sock:
            await sock.send(init)
            assert (await sock.closed())[0] == 1013  # try again later, not 4403 (forbidden)
        await postgres.start()
        async with Socket.open(served.url, token=tenant.token) as sock:
            await sock.subscribe()  # accepted: the same token works again


async def test_only_postgres_unreachable_is_service_unavailable(sessions: Sessions) -> None:
    """Redis refusing a connection inside a unit is Redis's error, not a 503: the db layer only
    looks into its drivers' errors."""
    nobody = Redis(port=free_port())

    async def unit_that_calls_redis() -> None:
        async with sessions.unit() as uow:
            await uow.execute(text("SELECT 1"))
            await nobody.ping()

    with pytest.raises(RedisConnectionError):
        await unit_that_calls_redis()
    await nobody.aclose()


async def test_requests_in_flight_when_postgres_dies_are_503_never_500(
    servers: Servers, postgres: OwnPostgres, own_sessions: Sessions
) -> None:
    """Six clients send startRun, cancelRun and runs without pause while PostgreSQL is SIGKILLed and
    restarted five times: every answer is 200 or 503 SERVICE_UNAVAILABLE. A unit holding a
    pooled connection when the server died got "connection has been released back to the
    pool" (asyncpg hands a closed connection back at once), and a connection released
    mid-operation failed its next user with "another operation is in progress": both were
    500s (16 of about 6,500 answers under twelve restarts), now 503s."""
    settings = make_settings(servers, database_url=postgres.url)
    tenants = [await new_tenant(own_sessions) for _ in range(6)]
    answers: dict[str, int] = {"ok": 0, "503": 0}
    wrong: list[str] = []
    moved = asyncio.Condition()
    stop = asyncio.Event()

    async def client(api: Api, token: str) -> None:
        n, last = 0, None
        while not stop.is_set():
            n += 1
            if n % 3 == 0:
                response = await api.post(RUNS, token=token)  # the raw pool, outside a unit
            elif n % 3 == 1 or last is None:
                response = await api.post(START, DEMO, token=token)  # a single-statement unit
            else:
                response = await api.post(CANCEL, {"id": last}, token=token)  # a transaction
            body = response.json()
            code = ((body.get("errors") or [{}])[0].get("extensions") or {}).get("code")
            if response.status_code == 200 and not body.get("errors"):
                kind = "ok"
                if "startRun" in body["data"]:
                    last = body["data"]["startRun"]["run"]["id"]
            elif (response.status_code, code) == (503, "SERVICE_UNAVAILABLE"):
                kind = "503"
            else:
                wrong.append(response.text[:300])
                continue
            async with moved:
                answers[kind] += 1
                moved.notify_all()

    async def until(kind: str, more: int) -> None:
        async with moved:
            target = answers[kind] + more
            await moved.wait_for(lambda: answers[kind] >= target)

    async with Api.running(settings) as api:
        clients = [asyncio.create_task(client(api, t.token)) for t in tenants]
        try:
            for _ in range(5):
                await until("ok", 30)  # requests in flight on live pooled connections
                await postgres.kill()
                await until("503", 30)
                await postgres.start()
            await until("ok", 30)  # and the pools recover by themselves
        finally:
            stop.set()
            await asyncio.gather(*clients)
    assert wrong == [], f"{len(wrong)} answers neither 200 nor 503: {wrong[:3]}"
