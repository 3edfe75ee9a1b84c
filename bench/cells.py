"""Benchmark: CPU per run with three cells against one cell, in the same run (issue 48).

    uv run python bench/cells.py [--tenants 30] [--runs 90] [--rounds 2]

One process serves the API (`build_app`, in memory) and a worker host per cell, as
`tests/cells/test_move.py` does. Phase "1 cell": no directory, every tenant on DATABASE_URL (the
deployment before cells). Phase "3 cells": a directory and two more cells (copies of the
migrated database), the tenants spread over the three. Each phase starts `--runs` runs of the
`demo` agent over `--tenants` tenants, 16 at once (18 worker slots in all), and waits in the
databases until all settled (after an untimed warm-up of a third as many runs, at least one per
tenant); its figure is this process's CPU seconds (user + system, `time.process_time`) per run,
less the bench's own wait for the runs (in a thread whose CPU is taken off). The phases
alternate `--rounds` times so that the machine's load falls on both alike; the ratio is the
median 3-cell figure over the median 1-cell one. PostgreSQL's and Redis's CPU are not counted
(other processes).

Each phase also measures this process's CPU for 3 s with no run (after the warm-up): the
timers every host runs whatever the load (heartbeats, the relay's and the clock's scans), three
hosts' worth with three cells. "Net of idle" takes that rate times the phase's length off its
CPU: a run's own cost, apart from the per-process cost of serving a cell.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import asyncpg
import httpx
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ADMIN_PG, bench_env, table

from outlive.app import build_app
from outlive.cells import cell_settings
from outlive.cli.serve import cell_hosts
from outlive.config import Settings
from outlive.db.directory import Cell, Directory
from outlive.db.engine import create_engine, create_sessions
from outlive.services.tenants import create_token

IDLE_S = 3.0
# The bench's own count of settled runs, per cell: three cells count three times as often, which
# at 0.1 s was about 0.15 ms of this process's CPU per run (3% of a run), the bench's, not the
# cells'. At 0.5 s it is a fifth of that; the wait it adds is idle, taken off by "net of idle".
POLL_S = 0.5
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
STATUS = "query($id: ID!) { run(id: $id) { status } }"


async def copy_database(template: str | None) -> str:
    """A new database: a copy of `template`'s (a migrated cell), or empty (the directory)."""
    name = f"outlive_bench_cell_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(ADMIN_PG)
    try:
        like = "" if template is None else f' TEMPLATE "{make_url(template).database}"'
        await admin.execute(f'CREATE DATABASE "{name}"{like}')
    finally:
        await admin.close()
    return make_url(ADMIN_PG).set(database=name).render_as_string(hide_password=False)


async def drop(urls: list[str]) -> None:
    admin = await asyncpg.connect(ADMIN_PG)
    try:
        for url in urls:
            await admin.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        await admin.close()


async def tokens_on(url: str, count: int, prefix: str) -> list[str]:
    engine = create_engine(url, pool_size=2)
    sessions = create_sessions(engine)
    made = []
    try:
        for n in range(count):
            async with sessions.unit() as uow:
                _, token = await create_token(
                    uow, tenant_slug=f"{prefix}-{n}", email=f"o@{prefix}-{n}.test"
                )
            made.append(token)
    finally:
        await engine.dispose()
    return made


@contextlib.asynccontextmanager
async def serving(settings: Settings, cells: list[Cell]) -> AsyncIterator[httpx.AsyncClient]:
    each = 18 // len(cells)  # the same worker concurrency in all: 18, or 6 per cell
    # as `outlive worker` with OUTLIVE_CELLS: the first host is the process's, the others cells'
    hosts = cell_hosts([cell_settings(settings, c) for c in cells], concurrency=each)
    for host in hosts:
        await host.start()
    app = build_app(settings, serve_web=False)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://b.test") as c:
                yield c
    finally:
        await asyncio.gather(*(h.stop() for h in hosts))


async def idle_cpu(seconds: float = IDLE_S) -> float:
    """This process's CPU seconds a second with no run: the hosts' and the API's own timers
    (heartbeats, the relay's and the clock's scans, the directory's poll), per process."""
    began = time.process_time()
    await asyncio.sleep(seconds)  # the measurement is of the time passing, idle
    return (time.process_time() - began) / seconds


async def cpu_per_run(
    client: httpx.AsyncClient, tokens: list[str], runs: int, cells: list[Cell]
) -> tuple[float, float]:
    """Start `runs` runs through the API, then wait for them in the databases. This process's
    CPU seconds per run, and the phase's wall seconds.

    The wait is the bench's, not the cells': a count per cell every `POLL_S` (not a poll per
    run, so the figure does not depend on how fast runs finish), in a thread of its own with its
    own loop, whose CPU (`time.thread_time`) is taken off. Polled from this loop, three cells'
    counts cost three times one cell's, 0.18 of a PostgreSQL round trip a run more (counted by
    caller), about 1 % of the ratio, all of it the bench's."""
    lanes = asyncio.Semaphore(16)

    async def one(n: int) -> None:
        headers = {"Authorization": f"Bearer {tokens[n % len(tokens)]}"}
        async with lanes:
            body = {"i": {"agent": "demo", "key": f"k{n}-{secrets.token_hex(3)}", "input": {}}}
            sent = await client.post(
                "/graphql", json={"query": START, "variables": body}, headers=headers
            )
            if sent.json().get("errors"):
                raise RuntimeError(sent.text)

    urls = [c.database_url for c in cells]
    settled = await _settled(urls) + runs
    started, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(runs)))
    waited = await asyncio.to_thread(_wait_settled, urls, settled)
    return (time.process_time() - started - waited) / runs, time.perf_counter() - wall


def _wait_settled(urls: list[str], settled: int) -> float:
    """Block until `settled` runs have succeeded over the cells; the CPU this thread spent."""
    began = time.thread_time()
    asyncio.run(_settled(urls, until=settled))
    return time.thread_time() - began


async def _settled(urls: list[str], *, until: int = 0) -> int:
    """The runs succeeded over the cells, counted every `POLL_S` until there are `until`."""
    conns = [await asyncpg.connect(url) for url in urls]
    try:
        while (count := await _count(conns)) < until:
            await asyncio.sleep(POLL_S)
        return count
    finally:
        for conn in conns:
            await conn.close()


async def _count(conns: list[asyncpg.Connection]) -> int:
    total = 0
    for conn in conns:
        total += await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'SUCCEEDED'")
    return total


async def main(args: argparse.Namespace) -> None:
    async with bench_env() as env:
        extra = [await copy_database(env.database_url) for _ in range(2)]
        directory_url = await copy_database(None)
        try:
            base = Settings(database_url=env.database_url, redis_url=env.redis_url)
            directory = await Directory.open(directory_url)
            await directory.ensure_schema(env.database_url)
            await directory.add_cell("c1", extra[0], slots=range(341, 682))
            await directory.add_cell("c2", extra[1], slots=range(682, 1024))
            cells = await directory.cells()
            one_cell = await tokens_on(env.database_url, args.tenants, "one")
            spread: list[str] = []
            per_cell = args.tenants // 3
            for cell in cells:
                for token, slug in zip(
                    await tokens_on(cell.database_url, per_cell, f"three-{cell.name}"),
                    [f"three-{cell.name}-{n}" for n in range(per_cell)],
                    strict=True,
                ):
                    spread.append(token)
                    placement = await _placed(cell.database_url, slug)
                    await directory.place(placement, slug, cell.name)
            await directory.close()
            three = base.model_copy(update={"directory_url": directory_url})
            figures: dict[str, list[tuple[float, float, float]]] = {"1 cell": [], "3 cells": []}
            alone = [Cell("default", env.database_url)]
            phases = (("1 cell", base, alone, one_cell), ("3 cells", three, cells, spread))
            # the warm-up grows every pool of every cell (the API's, the queues') to what the
            # load needs: with 30 runs, the 3 cells' phase still opened connections while it was
            # measured (0.13 of a Redis and of a PostgreSQL round trip a run more, counted)
            warm_up = max(len(one_cell), args.runs // 3)
            for _ in range(args.rounds):
                for name, settings, served, tokens in phases:
                    async with serving(settings, served) as client:
                        await cpu_per_run(client, tokens, warm_up, served)
                        idle = await idle_cpu()
                        cpu, wall = await cpu_per_run(client, tokens, args.runs, served)
                        figures[name].append((cpu, idle, cpu - idle * wall / args.runs))
        finally:
            await drop([*extra, directory_url])
    report(figures)


def report(figures: dict[str, list[tuple[float, float, float]]]) -> None:
    rows = [
        [
            name,
            " ".join(f"{cpu * 1000:.2f}" for cpu, _, _ in got),
            " ".join(f"{idle * 1000:.1f}" for _, idle, _ in got),
            " ".join(f"{net * 1000:.2f}" for _, _, net in got),
        ]
        for name, got in figures.items()
    ]
    header = ["phase", "CPU ms per run", "idle CPU ms/s", "net of idle, ms per run"]
    print(table(rows, header))
    for i, what in ((0, "CPU per run"), (2, "net of idle")):
        one, three = ([f[i] for f in figures[k]] for k in ("1 cell", "3 cells"))
        ratio = statistics.median(three) / statistics.median(one)
        # each round's 3 cells against the 1 cell just before it: the machine's drift over the
        # minutes of a bench (10 to 20 % between rounds of one phase here) falls on both alike
        paired = [b / a for a, b in zip(one, three, strict=True)]
        print(
            f"3 cells / 1 cell, {what}: {ratio:.3f}x (target <= 1.05x); round by round "
            f"{' '.join(f'{r:.3f}' for r in paired)}, median {statistics.median(paired):.3f}x"
        )


async def _placed(url: str, slug: str) -> UUID:
    conn = await asyncpg.connect(url)
    try:
        tenant_id: UUID = await conn.fetchval("SELECT id FROM tenants WHERE slug = $1", slug)
        return tenant_id
    finally:
        await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=30)
    parser.add_argument("--runs", type=int, default=90)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
