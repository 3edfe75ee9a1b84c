"""`outlive tenant move` (`outlive.moves`): a busy tenant moved between two cells while an API
and a worker per cell serve it. Its runs finish on the new cell, none lost or doubled, each
timeline's seq gap-free, its writes held about a second at most, its rows gone from the old
cell; a dry run changes nothing; an interrupted move resumes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import text

from outlive.cells import cell_settings
from outlive.cli.cells import list_tenants
from outlive.db.directory import Cell
from outlive.db.ports import NO_INSTANCES
from outlive.ids import TenantId
from outlive.moves import move_tenant
from outlive.services import pauses
from outlive.worker import WorkerHost
from tests.cells.conftest import TwoCells, served, tenant_on, until
from tests.support import Api

RUNS = 6


@contextlib.asynccontextmanager
async def workers(two_cells: TwoCells) -> AsyncIterator[None]:
    hosts = [
        WorkerHost(cell_settings(two_cells.settings, Cell(name, url)), concurrency=8)
        for name, url in two_cells.urls.items()
    ]
    for host in hosts:
        await host.start()
    try:
        yield
    finally:
        await asyncio.gather(*(h.stop() for h in hosts))


async def runs_on(two_cells: TwoCells, cell: str, tenant_id: TenantId) -> list[dict[str, Any]]:
    rows = await two_cells.sessions[cell].all(
        text("SELECT id, status, event_seq FROM runs WHERE tenant_id = :t"), t=tenant_id
    )
    return [dict(r) for r in rows]


async def test_a_busy_tenant_moves_live(two_cells: TwoCells) -> None:
    tenant_id, token, slug = await tenant_on(two_cells, "default")
    neighbour_id, neighbour, _ = await tenant_on(two_cells, "default")
    async with served(two_cells) as client, workers(two_cells):
        api = Api(client)
        started = [
            await start(api, token, f"k{i}", {"turns": 6, "delayMs": 150}) for i in range(RUNS)
        ]
        stays = await start(api, neighbour, "n", {"turns": 2})

        async def some_running() -> bool:
            runs = await runs_on(two_cells, "default", tenant_id)
            return any(r["status"] == "RUNNING" for r in runs)

        await until(some_running)
        dry = await move_tenant(two_cells.settings, slug, "b", dry_run=True)
        assert dry.rows["runs"] == RUNS
        assert await runs_on(two_cells, "b", tenant_id) == []  # a dry run changes nothing

        writes = asyncio.create_task(keep_writing(api, token))
        report = await move_tenant(two_cells.settings, slug, "b")
        late = await writes
        assert report.hold_s < 5.0, report  # ≤ 1 s at p99 in tests/cells/test_clusters.py
        assert await runs_on(two_cells, "default", tenant_id) == []  # gone from the old cell

        async def all_settled() -> bool:
            runs = await runs_on(two_cells, "b", tenant_id)
            return all(r["status"] == "SUCCEEDED" for r in runs)

        await until(all_settled, timeout_s=60)
        moved = {str(r["id"]) for r in await runs_on(two_cells, "b", tenant_id)}
        assert set(started) | set(late) == moved  # none lost, none doubled
        for run_id in started:
            run = await api.run(token, run_id, events=True)
            assert run is not None
            seqs = [e["seq"] for e in run["events"]]
            assert seqs == list(range(1, len(seqs) + 1)), seqs  # gap-free across the move
            turns = [e for e in run["events"] if e["type"] == "turn"]
            assert len(turns) == 6, run["events"]  # each turn once: none lost or redone
        neighbour_run = await api.run(neighbour, stays)
        assert neighbour_run is not None  # the neighbour stayed where it was
        assert (await two_cells.directory.placement(neighbour_id)).cell == "default"  # type: ignore[union-attr]


async def start(api: Api, token: str, key: str, input: dict[str, Any]) -> str:
    """startRun with a key of its own (one active run per tenant, agent and key)."""
    data = await api.gql(
        "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }",
        {"i": {"agent": "demo", "key": key, "input": input}},
        token=token,
    )
    run_id: str = data["startRun"]["run"]["id"]
    return run_id


async def keep_writing(api: Api, token: str) -> list[str]:
    """startRun every 50 ms during the move: each answered (held, never refused)."""
    ids = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        ids.append(await start(api, token, f"w{len(ids)}", {"turns": 1, "delayMs": 0}))
        await asyncio.sleep(0.05)
    return ids


async def test_an_interrupted_move_resumes(two_cells: TwoCells) -> None:
    """A move killed between its hold and its flip (the tenant held, paused on the old cell) is
    finished by running it again: copied, flipped, paused no more, gone from the old cell."""
    tenant_id, token, slug = await tenant_on(two_cells, "default")
    async with served(two_cells) as client:
        run_id = await start(Api(client), token, "k", {"turns": 1})  # no worker: it waits
    directory = two_cells.directory
    await directory.hold(tenant_id, held=True)
    async with two_cells.sessions["default"].unit() as uow:
        await pauses.pause_tenant(uow, slug, paused=True, instances=NO_INSTANCES)
    await directory.set_move(tenant_id, slug, "default", "b", "tail", True)  # as it was left

    report = await move_tenant(two_cells.settings, slug, "b")

    assert report.rows["runs"] == 1
    placement = await directory.placement(tenant_id)
    assert placement is not None
    assert (placement.cell, placement.held) == ("b", False)
    assert await directory.move(tenant_id) is None
    assert await runs_on(two_cells, "default", tenant_id) == []
    [run] = await runs_on(two_cells, "b", tenant_id)
    assert str(run["id"]) == run_id
    paused = await two_cells.sessions["b"].one(
        text(
            "SELECT t.paused_at AS tenant, r.paused_at AS run FROM tenants t"
            " JOIN runs r ON r.tenant_id = t.id WHERE t.id = :t"
        ),
        t=tenant_id,
    )
    assert paused is not None
    assert (paused["tenant"], paused["run"]) == (None, None)  # the move's pause is lifted
    listed = await list_tenants(two_cells.settings)
    assert f"{slug}\tb\t1 active" in listed  # `outlive tenant list`: on its new cell, once
    assert not any(line.startswith(f"{slug}\tdefault") for line in listed)
