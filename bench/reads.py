"""Benchmark: one tenant's expensive reads beside another tenant's cheap one (issue 26, M4).

    uv run python bench/reads.py [--runs 300000] [--loops 12] [--seconds 20]

The review's repro: tenant A has 300,000 settled runs over 30 days (written in SQL, about
10,000 a day), tenant B a few. One `outlive api`. B's `runs(first: 1)` is timed one request at
a time, first with the API idle, then while A runs `--loops` concurrent loops of
`agentStats(hours: h)` (each loop its own `h`, so that nothing is shared between them).

Two API settings, each in its own round: the defaults (`OUTLIVE_API_TENANT_MAX_READS` 4,
`OUTLIVE_API_STATEMENT_TIMEOUT_S` 5), and, for comparison in the same run, the bounds lifted (a
tenant may run 1,000 statements at once; no statement timeout), which is what the review
measured (B: 2 ms p50 idle, 604 ms during).

Target: with the defaults, B's p50 during A's reads under 3x its idle p50.

Needs PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL; default the local ones).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Env, KeepAlive, bench_env, free_port, outlive, table, wait_http
from runs import make_tenants

CHEAP = "{ runs(first: 1) { edges { node { id } } } }"
EXPENSIVE = "query($h: Int!) { agentStats(hours: $h) { agent runs p50DurationMs } }"
AGENTS = ("demo", "support", "triage", "billing", "search")
DEFAULTS: dict[str, str] = {}
LIFTED = {"OUTLIVE_API_TENANT_MAX_READS": "1000", "OUTLIVE_API_STATEMENT_TIMEOUT_S": "0"}


async def seed(conn: asyncpg.Connection, tenant: uuid.UUID, count: int) -> None:
    """`count` settled runs spread over the last 30 days, most of them SUCCEEDED."""
    await conn.execute(
        """INSERT INTO runs (tenant_id, agent, key, input, status, attempt, created_at,
                             started_at, finished_at)
           SELECT $1, ($3::text[])[1 + i % 5], 'r' || i, '{}',
                  CASE WHEN i % 10 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END, 1, at,
                  at + interval '10 ms', at + make_interval(secs => 0.1 + (i % 97) / 10.0)
             FROM generate_series(1, $2) i,
                  LATERAL (SELECT now() - (i * interval '30 days') / $2 AS at) t""",
        tenant,
        count,
        list(AGENTS),
    )
    await conn.execute("ANALYZE runs")


async def ask(client: KeepAlive, token: str, query: str, variables: dict[str, int]) -> float:
    """One request; its latency in ms. An answer with errors is a failed bench."""
    body = json.dumps({"query": query, "variables": variables}).encode()
    began = time.perf_counter()
    status, payload = await client.post_json("/graphql", body, {"Authorization": f"Bearer {token}"})
    took = (time.perf_counter() - began) * 1000
    answer = json.loads(payload)
    if status != 200 or answer.get("errors"):
        raise RuntimeError(f"{status}: {payload[:300]!r}")
    return took


async def probe(client: KeepAlive, token: str, seconds: float) -> list[float]:
    """B's cheap read, one at a time, for `seconds`."""
    took: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        took.append(await ask(client, token, CHEAP, {}))
    return took


async def expensive(port: int, token: str, hours: int, stop: asyncio.Event) -> int:
    """One loop of A's `agentStats(hours: hours)` until `stop`; how many it completed."""
    client, done = KeepAlive("127.0.0.1", port), 0
    while not stop.is_set():
        await ask(client, token, EXPENSIVE, {"h": hours})
        done += 1
    await client.close()
    return done


async def round_of(
    env: Env, name: str, settings: dict[str, str], tokens: tuple[str, str], args: argparse.Namespace
) -> list[object]:
    a_token, b_token = tokens
    port = free_port()
    with outlive("api", "--port", str(port), env=env.vars(**settings)):
        await wait_http(f"http://127.0.0.1:{port}/healthz", timeout=300)
        b = KeepAlive("127.0.0.1", port)
        await probe(b, b_token, 2.0)  # warm: the first requests of a fresh process
        idle = await probe(b, b_token, args.seconds)
        stop = asyncio.Event()
        loops = [
            asyncio.create_task(expensive(port, a_token, 744 - i, stop)) for i in range(args.loops)
        ]
        busy = await probe(b, b_token, args.seconds)
        stop.set()
        completed = sum(await asyncio.gather(*loops))
        await b.close()
    p50_idle, p50_busy = statistics.median(idle), statistics.median(busy)
    return [
        name,
        f"{p50_idle:.1f}",
        f"{p50_busy:.1f}",
        f"{sorted(busy)[int(len(busy) * 0.99)]:.1f}",
        f"{p50_busy / p50_idle:.2f}x",
        f"{completed / args.seconds:.1f}",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300_000, help="tenant A's settled runs")
    parser.add_argument("--loops", type=int, default=12, help="A's concurrent agentStats loops")
    parser.add_argument("--seconds", type=float, default=20.0, help="each measurement's length")
    args = parser.parse_args()
    async with bench_env() as env:
        conn = await asyncpg.connect(env.database_url)
        (a_id, a_token), (b_id, b_token) = await make_tenants(conn, 2)
        await seed(conn, a_id, args.runs)
        await seed(conn, b_id, 20)
        await conn.close()
        rows = [
            await round_of(env, "defaults", DEFAULTS, (a_token, b_token), args),
            await round_of(env, "bounds lifted", LIFTED, (a_token, b_token), args),
        ]
    print(
        f"one tenant's reads: {args.runs:,} runs over 30 days, {args.loops} concurrent"
        f" agentStats loops; the other tenant's runs(first: 1), one at a time"
    )
    header = ["API settings", "B p50 idle ms", "B p50 during", "B p99 during", "vs idle"]
    print(table(rows, [*header, "A's agentStats/s"]))
    print(f"target: B's p50 during < 3x idle with the defaults: {rows[0][4]}")


if __name__ == "__main__":
    asyncio.run(main())
