"""Benchmark: `startRun` through the full HTTP stack beside a floor, `runs(first: 50)` beside a
hand-written JSON endpoint, and end-to-end runs/s.

    uv run python bench/runs.py [--quick] [--only start,read,e2e]

1. `startRun` latency (p50/p99) and throughput at concurrency 1, 16 and 64, against a real
   `outlive api` process (uvicorn, Starlette, strawberry, auth, SQLAlchemy, the saq enqueue and
   the deferred nudge), beside a floor measured in the same run: the same INSERT … ON CONFLICT
   and the same saq enqueue done directly with asyncpg and saq from this process. Every request
   uses another tenant, so each one really inserts.
2. `runs(first: 50)` (every field of `RunFields`, with cursors and pageInfo) at concurrency 16
   against one `outlive api` process, beside `bench/_floor.py`'s `GET /runs?first=50` (Starlette
   + asyncpg: the token lookup, the SELECT, `json.dumps`), in the same run, rounds alternating:
   "one reader": every request with the same token (identical reads, which Outlive coalesces);
   "64 tenants": each request with the next of 64 tenants' tokens (no two in flight alike).
3. End to end: 3,000 `demo` runs (1 turn, 0 delay) queued first, then 1 or 2 `outlive worker`
   processes started; runs/s from the first claim to the last settle (database timestamps).

Needs PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL; default the local ones).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    Env,
    Figures,
    KeepAlive,
    bench_env,
    free_port,
    load,
    outlive,
    spawn,
    table,
    wait_http,
)
from dashboard import Scraper

from outlive.config import Settings
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.jobs.relay import MARKER_KEY
from outlive.jobs.run_instances import SaqRunInstances

START = (
    """mutation($input: StartRunInput!) { startRun(input: $input) { created run { id status } } }"""
)
INSERT = """INSERT INTO runs (tenant_id, agent, input, dispatched_at) VALUES ($1, 'demo', $2, now())
ON CONFLICT (tenant_id, agent, key) WHERE status IN ('QUEUED', 'RUNNING')
AND queued_behind_id IS NULL DO NOTHING RETURNING id"""
INPUT = {"turns": 1, "delayMs": 0}
RUNS_50 = json.dumps(
    {
        "query": "query Runs($first: Int!) { runs(first: $first) { edges { cursor node { id agent"
        " status attempt input output error createdAt startedAt finishedAt cancelRequestedAt } }"
        " pageInfo { hasNextPage endCursor } } }",
        "variables": {"first": 50},
    }
).encode()
READERS = 64
API_PROCESSES = [1, 2]  # `--api-processes`


async def make_tenants(conn: asyncpg.Connection, count: int) -> list[tuple[uuid.UUID, str]]:
    rows = [(uuid.uuid4(), uuid.uuid4(), "olv_" + secrets.token_urlsafe(32)) for _ in range(count)]
    await conn.copy_records_to_table(
        "tenants",
        records=[(t, f"bench-{i}", f"bench-{i}") for i, (t, _, _) in enumerate(rows)],
        columns=["id", "slug", "name"],
    )
    await conn.copy_records_to_table(
        "users",
        records=[(u, t, f"u{i}@bench.test") for i, (t, u, _) in enumerate(rows)],
        columns=["id", "tenant_id", "email"],
    )
    await conn.copy_records_to_table(
        "api_tokens",
        records=[(t, u, hashlib.sha256(k.encode()).digest()) for t, u, k in rows],
        columns=["tenant_id", "user_id", "token_hash"],
    )
    return [(t, k) for t, _, k in rows]


async def reset(conn: asyncpg.Connection, queue: object) -> None:
    await conn.execute("UPDATE runs SET status = 'CANCELLED' WHERE status IN ('QUEUED', 'RUNNING')")
    await queue.redis.flushdb()  # type: ignore[attr-defined]
    # A healthy queue keeps the relay's marker; without it the relays would take the flush for
    # a lost queue and hand everything again (the fault path, measured by bench/chaos.py).
    await queue.redis.set(MARKER_KEY, "1")  # type: ignore[attr-defined]


async def start_run_figures(
    env: Env,
    tenants: list[tuple[uuid.UUID, str]],
    quick: bool,
    api_processes: int,
    scraper: Scraper | None = None,
) -> list[tuple[int, Figures, Figures, Figures, float, float]]:
    conn = await asyncpg.connect(env.database_url)
    # 32: with two API processes holding their own pools, PostgreSQL's default 100 connections
    pool = await asyncpg.create_pool(env.database_url, min_size=8, max_size=32)
    queue = create_queue(env.redis_url, RUNS_QUEUE)
    instances = SaqRunInstances(
        queue, Settings(database_url=env.database_url, redis_url=env.redis_url, queue_timeout_s=60)
    )
    port, metrics_port, floor_port = free_port(), free_port(), free_port()
    floor_argv = [sys.executable, str(Path(__file__).parent / "_floor.py"), str(floor_port)]
    results = []
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"  # the API's own metrics listener
    metrics_env = env.vars(OUTLIVE_METRICS_PORT=str(metrics_port), OUTLIVE_METRICS_HOST="127.0.0.1")
    with (
        outlive(
            "api", "--port", str(port), "--workers", str(api_processes), env=metrics_env
        ) as api_process,
        spawn(floor_argv, env=env.vars()) as floor_process,
    ):
        await wait_http(f"http://127.0.0.1:{port}/healthz")
        await wait_http(f"http://127.0.0.1:{floor_port}/healthz")
        if scraper is not None:
            scraper.add(metrics_url)
        for concurrency, count in ((1, 300), (16, 1500), (64, 2500)):
            if quick:
                count //= 5
            warm = 100
            client = KeepAlive("127.0.0.1", port)
            by_hand = KeepAlive("127.0.0.1", floor_port)

            async def via_api(i: int, client: KeepAlive = client) -> None:
                body = json.dumps(
                    {"query": START, "variables": {"input": {"agent": "demo", "input": INPUT}}}
                ).encode()
                status, payload = await client.post_json(
                    "/graphql", body, {"Authorization": f"Bearer {tenants[i][1]}"}
                )
                answer = json.loads(payload)
                if (
                    status != 200
                    or answer.get("errors")
                    or not answer["data"]["startRun"]["created"]
                ):
                    raise RuntimeError(answer)

            async def floor(i: int) -> None:
                async with pool.acquire() as c:
                    run_id = await c.fetchval(INSERT, tenants[i][0], json.dumps(INPUT))
                await instances.start(run_id)

            async def http_floor(i: int, by_hand: KeepAlive = by_hand) -> None:
                body = json.dumps({"agent": "demo", "input": INPUT}).encode()
                status, payload = await by_hand.post_json(
                    "/start-run", body, {"Authorization": f"Bearer {tenants[i][1]}"}
                )
                if status != 200 or not json.loads(payload)["created"]:
                    raise RuntimeError(payload)

            api_rounds, floor_rounds, http_rounds = [], [], []
            cpu = {"api": 0.0, "http": 0.0}
            for _ in range(2):  # alternate, so all see the same machine weather
                await reset(conn, queue)
                await load("warm", http_floor, warm, concurrency)
                await reset(conn, queue)
                began = tree_cpu_s(floor_process.pid)
                http_rounds.append(await load("http floor", http_floor, count, concurrency))
                cpu["http"] += tree_cpu_s(floor_process.pid) - began
                await reset(conn, queue)
                await load("warm", via_api, warm, concurrency)
                await reset(conn, queue)
                began = tree_cpu_s(api_process.pid)
                api_rounds.append(await load("api", via_api, count, concurrency))
                cpu["api"] += tree_cpu_s(api_process.pid) - began
                await reset(conn, queue)
                await load("warm", floor, warm, concurrency)
                await reset(conn, queue)
                floor_rounds.append(await load("floor", floor, count, concurrency))
            await client.close()
            await by_hand.close()
            per_request = {k: v * 1000 / (2 * count) for k, v in cpu.items()}
            results.append(
                (
                    concurrency,
                    _merge(api_rounds),
                    _merge(http_rounds),
                    _merge(floor_rounds),
                    per_request["api"],
                    per_request["http"],
                )
            )
        if scraper is not None:
            scraper.remove(metrics_url)
    await pool.close()
    await conn.close()
    await queue.disconnect()
    return results


async def read_figures(
    env: Env, tenants: list[tuple[uuid.UUID, str]], quick: bool
) -> list[tuple[str, Figures, Figures]]:
    """`runs(first: 50)` at concurrency 16: Outlive beside the hand-written endpoint."""
    conn = await asyncpg.connect(env.database_url)
    await conn.execute(
        "INSERT INTO runs (tenant_id, agent, input, output, status) SELECT t, 'demo', $2::jsonb,"
        " $2::jsonb, 'SUCCEEDED' FROM unnest($1::uuid[]) AS t, generate_series(1, 50)",
        [t for t, _ in tenants[:READERS]],
        json.dumps(INPUT),
    )
    await conn.close()
    api_port, floor_port = free_port(), free_port()
    floor_argv = [sys.executable, str(Path(__file__).parent / "_floor.py"), str(floor_port)]
    count = 600 if quick else 3000
    results = []
    with (
        outlive("api", "--port", str(api_port), env=env.vars()),
        spawn(floor_argv, env=env.vars()),
    ):
        await wait_http(f"http://127.0.0.1:{api_port}/healthz")
        await wait_http(f"http://127.0.0.1:{floor_port}/healthz")
        api, floor = KeepAlive("127.0.0.1", api_port), KeepAlive("127.0.0.1", floor_port)
        for label, readers in (("one reader", 1), (f"{READERS} tenants", READERS)):

            async def via_api(i: int, readers: int = readers) -> None:
                auth = {"Authorization": f"Bearer {tenants[i % readers][1]}"}
                status, payload = await api.post_json("/graphql", RUNS_50, auth)
                if status != 200 or b'"errors"' in payload:
                    raise RuntimeError(payload)

            async def via_floor(i: int, readers: int = readers) -> None:
                auth = {"Authorization": f"Bearer {tenants[i % readers][1]}"}
                status, payload = await floor.get("/runs?first=50", auth)
                if status != 200:
                    raise RuntimeError(payload)

            api_rounds, floor_rounds = [], []
            for _ in range(2):  # alternate, so both see the same machine weather
                await load("warm", via_api, 200, 16)
                api_rounds.append(await load("api", via_api, count, 16))
                await load("warm", via_floor, 200, 16)
                floor_rounds.append(await load("floor", via_floor, count, 16))
            results.append((label, _merge(api_rounds), _merge(floor_rounds)))
        await api.close()
        await floor.close()
    return results


def _merge(rounds: list[Figures]) -> Figures:
    return Figures(
        rounds[0].label, [x for r in rounds for x in r.latencies], sum(r.elapsed for r in rounds)
    )


async def end_to_end(
    env: Env,
    tenants: list[tuple[uuid.UUID, str]],
    workers: int,
    count: int,
    scraper: Scraper | None = None,
) -> float:
    conn = await asyncpg.connect(env.database_url)
    queue = create_queue(env.redis_url, RUNS_QUEUE)
    instances = SaqRunInstances(
        queue, Settings(database_url=env.database_url, redis_url=env.redis_url, queue_timeout_s=60)
    )
    await reset(conn, queue)
    await conn.execute("DELETE FROM runs")
    ids = [
        r["id"]
        for r in await conn.fetch(
            "INSERT INTO runs (tenant_id, agent, input, dispatched_at)"
            " SELECT t, 'demo', $2::jsonb, now() "
            "FROM unnest($1::uuid[]) AS t RETURNING id",
            [t for t, _ in tenants[:count]],
            json.dumps(INPUT),
        )
    ]
    await asyncio.gather(*(instances.start(i) for i in ids))
    ports = [free_port() for _ in range(workers)]
    processes = [
        outlive(
            "worker",
            "--concurrency",
            "32",
            env=env.vars(OUTLIVE_METRICS_PORT=str(port), OUTLIVE_METRICS_HOST="127.0.0.1"),
        )
        for port in ports
    ]
    for p in processes:
        p.__enter__()
    targets = [f"http://127.0.0.1:{port}/metrics" for port in ports]
    for target in targets if scraper is not None else []:
        scraper.add(target)  # type: ignore[union-attr]  # checked just above
    try:
        deadline = time.monotonic() + 300
        while await conn.fetchval(
            "SELECT count(*) FROM runs WHERE status IN ('QUEUED', 'RUNNING')"
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("runs did not finish in 5 minutes")
            await asyncio.sleep(0.25)
    finally:
        for target in targets if scraper is not None else []:
            scraper.remove(target)  # type: ignore[union-attr]  # checked just above
        for p in processes:
            p.__exit__(None, None, None)
    first, last, ok = await conn.fetchrow(
        "SELECT min(started_at), max(finished_at), count(*) FILTER (WHERE status = 'SUCCEEDED') "
        "FROM runs"
    )
    await conn.close()
    await queue.disconnect()
    if ok != count:
        raise RuntimeError(f"only {ok} of {count} runs succeeded")
    return float(count / (last - first).total_seconds())


Tenants = list[tuple[uuid.UUID, str]]


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children (`--workers N`)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            with open(f"/proc/{current}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            with open(f"/proc/{current}/task/{current}/children") as children:
                pending += [int(c) for c in children.read().split()]
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def print_start_runs(
    env: Env, tenants: Tenants, quick: bool, scraper: Scraper | None
) -> None:
    rows = []
    for processes in API_PROCESSES:
        figures = await start_run_figures(env, tenants, quick, processes, scraper)
        for concurrency, api, http, floor, api_cpu, http_cpu in figures:
            rows.append(
                [
                    processes,
                    concurrency,
                    f"{api.p50_ms:.2f}",
                    f"{http.p50_ms:.2f}",
                    f"{api.p50_ms / http.p50_ms:.2f}x",
                    f"{floor.p50_ms:.2f}",
                    f"{api.p50_ms / floor.p50_ms:.2f}x",
                    f"{api.p99_ms:.2f}",
                    f"{http.p99_ms:.2f}",
                    f"{api.per_s:.0f}",
                    f"{http.per_s:.0f}",
                    f"{floor.per_s:.0f}",
                    f"{api_cpu:.3f}",
                    f"{http_cpu:.3f}",
                    f"{api_cpu / http_cpu:.2f}x",
                ]
            )
    print(
        "startRun through HTTP vs the http floor (a hand-written Starlette endpoint doing the same"
        " work) and the direct floor (asyncpg INSERT + saq enqueue, no HTTP)"
    )
    header = ["api procs", "conc", "p50 ms", "http p50", "vs http", "direct p50", "vs direct"]
    more = ["p99 ms", "http p99", "req/s", "http/s", "direct/s", "cpu ms/req", "http cpu", "cpu"]
    print(table(rows, [*header, *more]))
    print("target: p50 at most 1.5x the http floor at concurrency 1, 16 and 64 (one process):")
    for r in rows[:3]:
        ratio = float(str(r[4]).rstrip("x"))
        print(f"  concurrency {r[1]}: {ratio:.2f}x ({'ok' if ratio <= 1.5 else 'OVER'})")


async def print_reads(env: Env, tenants: Tenants, quick: bool, _: Scraper | None) -> None:
    rows = []
    for label, api, floor in await read_figures(env, tenants, quick):
        rows.append(
            [
                label,
                f"{api.per_s:.0f}",
                f"{floor.per_s:.0f}",
                f"{api.per_s / floor.per_s:.2f}x",
                f"{api.p50_ms:.2f}",
                f"{floor.p50_ms:.2f}",
                f"{api.p99_ms:.2f}",
                f"{floor.p99_ms:.2f}",
            ]
        )
    print("runs(first: 50) at concurrency 16 vs a hand-written JSON endpoint (Starlette + asyncpg)")
    header = ["who reads", "req/s", "floor/s", "ratio", "p50 ms", "floor p50", "p99 ms"]
    print(table(rows, [*header, "floor p99"]))
    print("target: req/s at least 0.5x the hand-written endpoint's")


async def print_end_to_end(
    env: Env, tenants: Tenants, quick: bool, scraper: Scraper | None
) -> None:
    count = 600 if quick else 3000
    e2e = []
    for workers in (1, 2):
        rates = [await end_to_end(env, tenants, workers, count, scraper) for _ in range(2)]
        e2e.append(
            [
                workers,
                count,
                f"{statistics.median(rates):.0f}",
                " ".join(f"{r:.0f}" for r in rates),
            ]
        )
    print("end to end: demo runs (1 turn, 0 delay), first claim to last settle")
    print(table(e2e, ["workers", "runs", "median runs/s", "rounds"]))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a smoke run")
    parser.add_argument("--only", default="start,read,e2e", help="which parts, comma-separated")
    parser.add_argument(
        "--scrape", type=Path, help="scrape every process's /metrics each second into this file"
    )
    parser.add_argument(
        "--api-processes", default="1,2", help="startRun: API process counts, comma-separated"
    )
    args = parser.parse_args()
    API_PROCESSES[:] = [int(n) for n in args.api_processes.split(",")]
    parts = set(args.only.split(","))
    scraper = Scraper(args.scrape) if args.scrape else None
    async with bench_env() as env, contextlib.AsyncExitStack() as stack:
        if scraper is not None:
            await stack.enter_async_context(scraper.running())
        conn = await asyncpg.connect(env.database_url)
        tenants = await make_tenants(conn, 3000)
        await conn.close()
        for name, part in (
            ("start", print_start_runs),
            ("read", print_reads),
            ("e2e", print_end_to_end),
        ):
            if name in parts:
                await part(env, tenants, args.quick, scraper)
                print()


if __name__ == "__main__":
    asyncio.run(main())
