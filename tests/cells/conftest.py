"""Cells on the test server: each cell a migrated database of its own (`Servers.clone`), the
directory an empty one. The slow tier's `test_clusters.py` runs each cell on a PostgreSQL of its
own instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple
from uuid import uuid4

import httpx
import pytest

from outlive.app import build_app
from outlive.config import Settings
from outlive.db.directory import Directory
from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from outlive.ids import TenantId
from outlive.services.tenants import create_token
from outlive.urls import PostgresUrl
from tests.conftest import make_settings
from tests.support import Servers


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 20) -> None:
    """Look every 10 ms: the directory's rows and a view's polls announce nothing."""
    async with asyncio.timeout(timeout_s):
        while not await check():  # noqa: ASYNC110 (a table and a poll: no event to await)
            await asyncio.sleep(0.01)


@dataclass
class TwoCells:
    directory: Directory
    directory_url: str
    urls: dict[str, str]  # cell name -> DATABASE_URL
    sessions: dict[str, Sessions]
    settings: Settings  # the API's: DATABASE_URL the default cell, with the directory


async def empty_database(servers: Servers, suffix: str) -> str:
    name = f"outlive_test_{servers.run_id}_{suffix}{len(servers.cloned) + 1}"
    await servers.admin.execute(f'CREATE DATABASE "{name}"')
    servers.cloned.append(name)
    return str(PostgresUrl.parse(servers.database_url).with_database(name))


@pytest.fixture
async def two_cells(servers: Servers) -> AsyncIterator[TwoCells]:
    urls = {"default": await servers.clone(), "b": await servers.clone()}
    directory_url = await empty_database(servers, "dir")
    directory = await Directory.open(directory_url)
    await directory.ensure_schema(urls["default"])
    await directory.add_cell("b", urls["b"], slots=range(512, 1024))
    engines = {name: create_engine(url, pool_size=4) for name, url in urls.items()}
    settings = make_settings(
        servers,
        database_url=urls["default"],
        directory_url=directory_url,
        directory_poll_s=0.05,
    )
    try:
        yield TwoCells(
            directory=directory,
            directory_url=directory_url,
            urls=urls,
            sessions={name: create_sessions(e) for name, e in engines.items()},
            settings=settings,
        )
    finally:
        for engine in engines.values():
            await engine.dispose()
        await directory.close()


class Placed(NamedTuple):
    id: TenantId
    token: str
    slug: str


async def tenant_on(two_cells: TwoCells, cell: str) -> Placed:
    """A new tenant (and its token) on `cell`, placed there in the directory."""
    slug = f"c{cell}-{uuid4().hex[:8]}"
    async with two_cells.sessions[cell].unit() as uow:
        principal, token = await create_token(uow, tenant_slug=slug, email=f"o@{slug}.test")
    await two_cells.directory.place(principal.tenant.id, slug, cell)
    return Placed(principal.tenant.id, token, slug)


@contextlib.asynccontextmanager
async def served(two_cells: TwoCells) -> AsyncIterator[httpx.AsyncClient]:
    """An API process (in this one) serving both cells."""
    app = build_app(two_cells.settings, serve_web=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://outlive.test") as c:
            yield c
