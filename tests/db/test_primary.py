"""Connections go to the primary among `DATABASE_URL`'s hosts, and never stay on a node that
answers read-only (`outlive.db.primary`, `outlive.db.drivers`). The real standby of a Patroni
cluster is in `tests/db/test_failover.py`; here the hosts that are down, hung or read-only are
made on the shared server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from outlive.cli.migrate import upgrade
from outlive.db import primary
from outlive.db.engine import create_engine, create_sessions
from outlive.db.raw import create_pool, prepare
from outlive.db.tx import Sessions
from outlive.errors import ServiceUnavailable
from outlive.services.tenants import create_token
from outlive.urls import PostgresUrl
from tests.conftest import make_settings
from tests.faults import free_port
from tests.support import Servers

READ_ONLY = {"default_transaction_read_only": "on"}  # what a fenced node answers with


def with_hosts(url: str, *hosts: str) -> str:
    """`url` (one host) with these hosts in front of its own."""
    parsed = PostgresUrl.parse(url)
    return str(parsed.__class__(**{**parsed.__dict__, "hosts": (*hosts, *parsed.hosts)}))


@contextlib.asynccontextmanager
async def hung_host() -> AsyncIterator[tuple[str, list[asyncio.StreamWriter]]]:
    """A host that accepts TCP and never answers (a frozen machine); yields it and the
    connections it got."""
    got: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(writer)
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}", got
    finally:
        server.close()
        for writer in got:
            writer.close()
        await server.wait_closed()


async def test_a_multi_host_url_reaches_the_primary_past_a_host_that_is_down(
    servers: Servers,
) -> None:
    url = with_hosts(servers.database_url, f"127.0.0.1:{free_port()}")
    url += "?target_session_attrs=read-write"
    conn = await primary.connect(url)
    assert await conn.fetchval("SELECT NOT pg_is_in_recovery()")
    await conn.close()
    pool = await create_pool(url)
    engine = create_engine(url)
    try:
        sessions = create_sessions(engine, raw=pool)
        async with sessions.unit() as uow:  # SQLAlchemy's pool
            await create_token(uow, tenant_slug="multi-host", email="a@multi-host.test")
        assert await sessions.one(text("SELECT 1 AS one")) == {"one": 1}  # the raw pool
    finally:
        await pool.close()
        await engine.dispose()


async def test_outlive_migrate_takes_a_multi_host_url(servers: Servers) -> None:
    """It died with a ValueError from URL parsing: now the database is checked at head."""
    database = await servers.clone()
    url = with_hosts(database, f"127.0.0.1:{free_port()}") + "?target_session_attrs=read-write"
    await upgrade(make_settings(servers, database_url=url))


async def test_a_hung_host_costs_its_timeout_once_then_the_primary_is_tried_first(
    servers: Servers, monkeypatch: Any
) -> None:
    monkeypatch.setattr(primary, "CONNECT_TIMEOUT_S", 0.5)
    async with hung_host() as (host, got):
        url = with_hosts(servers.database_url, host)
        first = await primary.connect(url)  # the hung host's timeout, then the primary
        second = await primary.connect(url)  # the primary at once
        assert len(got) == 1
        await first.close()
        await second.close()


async def test_no_read_only_node_is_taken_for_the_primary(servers: Servers) -> None:
    url = with_hosts(servers.database_url, f"127.0.0.1:{free_port()}")
    with pytest.raises(primary.NoPrimary, match="read-only") as raised:
        await primary.connect(url, server_settings=READ_ONLY)
    assert "refused" in str(raised.value).lower() or "connect call failed" in str(raised.value)
    with pytest.raises(primary.NoPrimary, match="read-only"):  # one host: the same
        await primary.connect(servers.database_url, server_settings=READ_ONLY)


@pytest.fixture
async def one_connection_each(servers: Servers) -> AsyncIterator[Sessions]:
    """Sessions whose pools hold one connection each, so a test can turn it read-only."""
    engine = create_engine(servers.database_url, pool_size=1)
    pool = await create_pool(servers.database_url, max_size=1)
    yield create_sessions(engine, raw=pool)
    await pool.close()
    await engine.dispose()


WRITE = prepare(text("CREATE TEMPORARY TABLE IF NOT EXISTS written (x int)"))


async def test_a_pooled_connection_that_turned_read_only_is_a_lost_one(
    one_connection_each: Sessions,
) -> None:
    """A node fenced read-only in place: "cannot execute … in a read-only transaction" is
    `ServiceUnavailable` (503 on the API, a retry in a worker), never a 500, and the connection
    is not used again: the next statement gets a new one, on the primary."""
    sessions = one_connection_each
    assert sessions.raw is not None
    async with sessions.raw.acquire() as conn:  # the raw pool's one connection
        await conn.execute("SET default_transaction_read_only = on")
    with pytest.raises(ServiceUnavailable) as raised:
        await sessions.execute(WRITE)
    assert isinstance(raised.value.__cause__, asyncpg.ReadOnlySQLTransactionError)
    await sessions.execute(WRITE)  # a new connection

    async with sessions.unit() as uow:  # SQLAlchemy's one connection, left read-only
        await uow.execute(text("SET SESSION default_transaction_read_only = on"))
    with pytest.raises(ServiceUnavailable):
        async with sessions.unit() as uow:
            await uow.execute(WRITE)
    async with sessions.unit() as uow:  # invalidated: a new connection
        await uow.execute(WRITE)
        assert await uow.one(text("SHOW default_transaction_read_only")) == {
            "default_transaction_read_only": "off"
        }
