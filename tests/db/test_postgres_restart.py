"""PostgreSQL restarts are ordinary: while it is down the API answers 503 `SERVICE_UNAVAILABLE`
with `retryAfter` (never a 500, never a 401 for a good token), `/readyz` names it, and once it is
back the pools reconnect by themselves: the first request succeeds. A real cluster of the test's
own is SIGKILLed (postmaster and backends) and restarted through crash recovery."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import text

from outlive.db import drivers
from outlive.db.engine import create_engine, create_sessions
from outlive.db.liveness import Liveness, worker_gone
from outlive.db.tx import Sessions
from outlive.services.relay.queries import ORPHANED
from outlive.services.runs import claim_run
from tests.conftest import make_settings, new_tenant
from tests.faults import OwnPostgres, StallingProxy, free_port
from tests.realtime.clients import Socket, serve
from tests.support import Api, Servers
from tests.workflows.test_claim import new_run

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


@pytest.mark.parametrize("how", ["restarted", "a backend killed"])
async def test_a_live_workers_runs_are_not_handed_again_because_a_restart_lost_its_lock(
    postgres: OwnPostgres, own_sessions: Sessions, how: str
) -> None:
    """A crash restart loses every advisory lock, and so does a backend killed by the OOM
    killer (the postmaster resets every session, and keeps its start time). Worker `a` is back
    at once; worker `b` lives but cannot reach the server for a while (its network to it
    stalls). Its lock is free on the server, but it never took it there since: neither the relay
    nor a claim takes its run. Once it is back and then gone for real, its run is handed."""
    through = postgres.url.replace(f":{postgres.port}/", "::port/")
    async with StallingProxy.to("127.0.0.1", postgres.port) as proxy:
        a, b = Liveness(postgres.url), Liveness(through.replace("::port/", f":{proxy.port}/"))
        await a.start()
        await b.start()
        try:
            key, a_key = b.worker_id, a.worker_id
            assert key is not None
            assert a_key is not None
            tenant = await new_tenant(own_sessions)
            run_id = await new_run(own_sessions, tenant)
            async with own_sessions.unit() as uow:
                assert await claim_run(uow, run_id, lease_s=60, worker_id=key) is not None

            proxy.stall()  # b may not even learn that its session was cut
            if how == "restarted":
                await postgres.restart()  # SIGKILL, then crash recovery: a new start time
            else:
                assert a._conn is not None
                sentinel = await asyncpg.connect(postgres.url)
                os.kill(a._conn.get_server_pid(), signal.SIGKILL)  # same start time
                await _until_reset(sentinel)
            conn = await _connect_when_up(postgres.url)
            try:
                await _until_taken_here(conn, a_key)  # a is back
                assert await conn.fetchval(GONE, key) is False  # free, but not taken here
                assert await own_sessions.all(ORPHANED, batch=10) == []
                async with own_sessions.unit() as uow:
                    assert await claim_run(uow, run_id, lease_s=60, worker_id=None) is None

                proxy.flow()  # b reaches the server again, by itself, with its key
                await _until_taken_here(conn, key)
                assert await conn.fetchval(GONE, key) is False
                await b.stop()
                await _until_gone(conn, key)  # gone for real now (its session ends)
                assert [r["id"] for r in await own_sessions.all(ORPHANED, batch=10)] == [run_id]
            finally:
                await conn.close()
        finally:
            await a.stop()
            await b.stop()


GONE = f"SELECT {worker_gone('CAST($1 AS integer)')}"


async def _until_gone(conn: asyncpg.Connection, key: int) -> None:
    async with asyncio.timeout(20):
        while not await conn.fetchval(GONE, key):  # noqa: ASYNC110 (pg_locks: no event)
            await asyncio.sleep(0.05)


async def _until_reset(sentinel: asyncpg.Connection) -> None:
    """Until the postmaster has begun its reset after a backend's crash: it ends every backend,
    the sentinel's too. A connection made before that would be ended by it (CI saw one cut in
    the middle of its start-up); after it, connections are refused until recovery is done."""
    async with asyncio.timeout(30):
        try:
            while True:  # the reset announces nothing: ask until the sentinel is cut
                await sentinel.fetchval("SELECT 1")
                await asyncio.sleep(0.02)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            pass
    sentinel.terminate()


async def _connect_when_up(url: str) -> asyncpg.Connection:
    """A connection once the server takes them again (it resets after a backend's crash)."""
    async with asyncio.timeout(30):
        while True:
            try:
                return await asyncpg.connect(url)
            except (OSError, asyncpg.CannotConnectNowError, asyncpg.ConnectionDoesNotExistError):
                await asyncio.sleep(0.05)  # recovering: it announces nothing


async def _until_taken_here(conn: asyncpg.Connection, key: int) -> None:
    """Until the worker of `key` has taken its lock on this server's current life (a reconnect
    announces nothing: look every 50 ms, for at most 20 s)."""
    async with asyncio.timeout(20):
        while not await conn.fetchval(  # noqa: ASYNC110 (no event)
            "SELECT EXISTS (SELECT 1 FROM liveness_locks WHERE worker_id = $1"
            " AND server_started_at = pg_postmaster_start_time())",
            key,
        ):
            await asyncio.sleep(0.05)
