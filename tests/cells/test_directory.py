"""The directory (tenant -> slot -> cell), a process's view of it, and an API that routes each
request to its tenant's cell (`outlive.db.directory`, `outlive.db.directory_view`,
`outlive.cells`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from uuid import uuid4

import pytest
from sqlalchemy import text

from outlive.cli.common import CliError
from outlive.cli.serve import cell_hosts, worker_cells
from outlive.cli.tokens import create_token as cli_create_token
from outlive.db.directory_view import DirectoryView
from outlive.errors import ServiceUnavailable
from outlive.ids import SLOTS, TenantId, home_slot
from outlive.services.tenants import mint_token, token_tenant
from tests.cells.conftest import TwoCells, served, tenant_on, until
from tests.support import Api


async def _true(value: bool) -> bool:
    return value


async def _none(lagging: Awaitable[list[str]]) -> bool:
    return not await lagging


def test_a_token_names_its_tenant() -> None:
    tenant = TenantId(uuid4())
    token = mint_token(tenant)
    assert token.startswith("olv_")
    assert token_tenant(token) == tenant
    assert token_tenant("olv_" + "A" * 43) is None  # made before cells: the default cell's
    assert token_tenant("olv_" + "!" * 22 + ".x") is None
    assert 0 <= home_slot(tenant) < SLOTS


async def test_a_stale_view_refuses_and_a_read_makes_it_fresh(two_cells: TwoCells) -> None:
    now = [100.0]
    view = DirectoryView(two_cells.directory, poll_s=0.2, stale_s=2.0, clock=lambda: now[0])
    tenant = TenantId(uuid4())
    await two_cells.directory.place(tenant, f"s-{tenant.hex[:8]}", "b")
    with pytest.raises(ServiceUnavailable):
        view.cell_of(tenant)  # never read: nothing answered
    await view.poll()
    assert view.cell_of(tenant) == "b"
    assert view.cell_of(TenantId(uuid4())) == "default"  # no row: the default cell
    now[0] += 2.01  # past OUTLIVE_DIRECTORY_STALE_S without a read
    with pytest.raises(ServiceUnavailable):
        view.cell_of(tenant)
    await view.poll()
    assert view.cell_of(tenant) == "b"


async def test_the_directory_pool_gives_a_connection_back_without_a_reset(
    two_cells: TwoCells,
) -> None:
    """asyncpg's default reset is a round trip (`RESET ALL` and co.) after every statement of
    the pool; the directory's statements leave no session state, so none is made: a setting
    made on the connection is still there when it is taken again."""
    pool = two_cells.directory.pool
    async with pool.acquire() as conn:
        await conn.execute("SET application_name = 'kept'")
        pid = conn.get_server_pid()
    async with pool.acquire() as conn:
        assert conn.get_server_pid() == pid
        assert await conn.fetchval("SHOW application_name") == "kept"


async def test_an_unchanged_view_acknowledges_once_a_fifth_of_the_staleness_bound(
    two_cells: TwoCells,
) -> None:
    """Not on every poll (an upsert each): again only once stale_s / 5 passed since the last."""
    now = [100.0]
    directory = two_cells.directory
    view = DirectoryView(directory, poll_s=0.2, stale_s=2.0, clock=lambda: now[0])
    seen = "SELECT seen_at FROM viewers WHERE id = $1"
    await view.poll()
    first = await directory.pool.fetchval(seen, view.viewer)
    now[0] += 0.3  # within a fifth of stale_s: nothing new, no upsert
    await view.poll()
    assert await directory.pool.fetchval(seen, view.viewer) == first
    now[0] += 0.2  # 0.5 s, past 0.4: due
    await view.poll()
    assert await directory.pool.fetchval(seen, view.viewer) > first
    tenant = TenantId(uuid4())
    version = await directory.place(tenant, f"s-{tenant.hex[:8]}", "b")
    now[0] += 0.01  # a change is acknowledged at once
    await view.poll()
    assert await directory.lagging(version, live_s=2.0) == []


async def test_a_change_is_seen_within_a_poll(two_cells: TwoCells) -> None:
    directory = two_cells.directory
    view = DirectoryView(directory, poll_s=0.05, stale_s=2.0)
    tenant = TenantId(uuid4())
    await directory.place(tenant, f"s-{tenant.hex[:8]}", "default")
    await view.poll()
    task = asyncio.create_task(view.run())
    try:
        changed = time.monotonic()
        version = await directory.place(tenant, f"s-{tenant.hex[:8]}", "b")
        await until(lambda: _true(view.cell_of(tenant) == "b"))
        seen_s = time.monotonic() - changed
        assert seen_s < 1.0, seen_s  # poll_s 0.05 and one read, on a loaded machine
        await until(lambda: _none(directory.lagging(version, live_s=2.0)))  # acknowledged
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_change_is_read_when_the_directory_announces_it(two_cells: TwoCells) -> None:
    """The view listens for the directory's changes (a trigger NOTIFYs them): with a poll and an
    acknowledgement a minute and 12 s apart, a change is still read and acknowledged at once."""
    directory = two_cells.directory
    view = DirectoryView(directory, poll_s=60.0, stale_s=60.0)
    tenant = TenantId(uuid4())
    await directory.place(tenant, f"s-{tenant.hex[:8]}", "default")
    task = asyncio.create_task(view.run())
    try:
        await until(lambda: _true(view.listening and view.cell_of(tenant) == "default"))
        version = await directory.place(tenant, f"s-{tenant.hex[:8]}", "b")
        # within 5 s: far below the 12 s acknowledgement and the 60 s poll
        await until(lambda: _none(directory.lagging(version, live_s=60.0)), timeout_s=5)
        assert view.cell_of(tenant) == "b"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_failed_read_is_tried_again_every_poll_not_at_once(
    two_cells: TwoCells, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listening, the view reads again when its acknowledgement is due; a read that failed is
    not an acknowledgement, and is tried again every `poll_s`, not in a loop."""
    directory = two_cells.directory
    view = DirectoryView(directory, poll_s=0.2, stale_s=60.0)
    await view.poll()
    failures: list[float] = []
    loop = asyncio.get_running_loop()

    async def unreadable(_: int = 0) -> list[object]:
        failures.append(loop.time())
        raise OSError("the directory is away")

    monkeypatch.setattr(directory, "placements", unreadable)
    view.fresh_at = float("-inf")  # its acknowledgement is due: the next read is now
    task = asyncio.create_task(view.run())
    try:
        await until(lambda: _true(len(failures) >= 3), timeout_s=5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert failures[2] - failures[0] >= 2 * 0.2 * 0.9, failures


async def test_a_hold_is_acknowledged_once_the_requests_in_flight_finished(
    two_cells: TwoCells,
) -> None:
    directory = two_cells.directory
    finished = asyncio.Event()
    drained: list[set[TenantId]] = []

    async def drain(tenants: set[TenantId]) -> None:
        drained.append(tenants)
        await finished.wait()

    view = DirectoryView(directory, poll_s=0.05, stale_s=2.0, drain=drain)
    tenant = TenantId(uuid4())
    await directory.place(tenant, f"s-{tenant.hex[:8]}", "default")
    await view.poll()
    version = await directory.hold(tenant, held=True)
    polled = asyncio.create_task(view.poll())
    await until(lambda: _true(bool(drained)))
    assert drained == [{tenant}]
    assert view.viewer in await directory.lagging(version, live_s=2.0)  # not acknowledged yet
    finished.set()
    await polled
    assert await directory.lagging(version, live_s=2.0) == []
    assert view.held(tenant)


async def test_the_api_routes_each_tenant_to_its_cell(two_cells: TwoCells) -> None:
    on_default = await tenant_on(two_cells, "default")
    on_b = await tenant_on(two_cells, "b")
    async with served(two_cells) as client:
        api = Api(client)
        ids = {}
        for (_, token, _), cell in ((on_default, "default"), (on_b, "b")):
            started = await api.start_run(token, input={"turns": 1})
            ids[cell] = started["run"]["id"]
            assert (await api.run(token, ids[cell]))["id"] == ids[cell]
    for cell, other in (("default", "b"), ("b", "default")):
        count = text("SELECT count(*) AS n FROM runs WHERE id = CAST(:id AS uuid)")
        assert (await two_cells.sessions[cell].one(count, id=ids[cell]))["n"] == 1
        assert (await two_cells.sessions[other].one(count, id=ids[cell]))["n"] == 0


async def test_a_held_tenant_waits_for_the_release(two_cells: TwoCells) -> None:
    tenant_id, token, _ = await tenant_on(two_cells, "b")
    async with served(two_cells) as client:
        api = Api(client)
        await api.start_run(token, input={"turns": 1})
        version = await two_cells.directory.hold(tenant_id, held=True)
        await until(lambda: _none(two_cells.directory.lagging(version, live_s=2.0)))
        waiting = asyncio.create_task(api.start_run(token, input={"turns": 1}))
        done, _ = await asyncio.wait({waiting}, timeout=0.5)
        assert not done  # held: it waits
        released = time.monotonic()
        await two_cells.directory.hold(tenant_id, held=False)
        await waiting
        assert time.monotonic() - released < 2.0


async def test_token_create_finds_the_tenants_cell(two_cells: TwoCells) -> None:
    """`outlive token create`: a tenant of cell b gets its token there; a new tenant is made on
    the default cell and listed in the directory."""
    tenant_id, _, slug = await tenant_on(two_cells, "b")
    _, token = await cli_create_token(two_cells.settings, slug, f"second@{slug}.test")
    assert token_tenant(token) == tenant_id  # the existing tenant, not a new one on default
    count = text("SELECT count(*) AS n FROM tenants WHERE slug = :slug")
    assert (await two_cells.sessions["default"].one(count, slug=slug))["n"] == 0
    fresh = f"new-{uuid4().hex[:8]}"
    _, made = await cli_create_token(two_cells.settings, fresh, f"o@{fresh}.test")
    placement = await two_cells.directory.by_slug(fresh)
    assert placement is not None
    assert (placement.tenant_id, placement.cell) == (token_tenant(made), "default")


async def test_a_worker_serves_the_cells_it_is_given(two_cells: TwoCells) -> None:
    """`outlive worker`: a host per cell of OUTLIVE_CELLS (all without it), each with its
    cell's database and queue names; the first one is the process's own (the metrics port)."""
    settings = two_cells.settings.model_copy(update={"metrics_port": 9464})
    every = await worker_cells(settings)
    assert [(s.cell, s.database_url) for s in every] == sorted(two_cells.urls.items())
    hosts = cell_hosts(every, concurrency=2)  # the first the process's: its probe, its port
    assert [h.role for h in hosts] == ["worker", "worker-cell"]
    assert [s.of_cell("outlive-runs") for s in every] == ["outlive-runs@b", "outlive-runs"]
    only_b = await worker_cells(settings.model_copy(update={"cells": ["b"]}))
    assert [s.cell for s in only_b] == ["b"]
    with pytest.raises(CliError, match="no cell nowhere"):
        await worker_cells(settings.model_copy(update={"cells": ["nowhere"]}))
