"""Benchmark: N sleeping runs hold no worker slot, and wake at their due time.

    uv run python bench/waits.py [--runs 10000] [--spread 10] [--concurrency 32]

1. N tenants, each with one `demo` run `{turns: 1, delayMs: 0, pauseMs: 3600000}` written
   QUEUED and admitted (SQL: the startRun path is benchmarked by bench/runs.py), due for the
   relay at once. One `outlive worker --concurrency C` claims each and parks it WAITING.
   Reported: how long parking all N took, and, once they are all WAITING, the worker's slots in
   use (saq's active runs, and RUNNING rows: both must be 0).
2. The timers are moved to due times spread evenly over `--spread` seconds starting 3 s ahead
   (an UPDATE of `wake_at`, the only setup step that is not the product's own path: the sleeps
   were an hour long so that all N are asleep at once). The worker's relay wakes them.
   Lateness = the `resumed` event's time minus the due time (PostgreSQL's clock on both
   sides), over every run; and to the next `claimed` event (a worker slot running it again).
   A sleep is handed back `OUTLIVE_WAKE_LEAD_S` ahead (docs/architecture.md, "Durable timers,
   handed back ahead"), so both may be negative by up to the lead: the agent goes on at `until`.
3. The floor, in the same run: a bare asyncpg loop over a table of N rows with the same due
   times, sleeping until the earliest and taking due rows (`FOR UPDATE SKIP LOCKED`, 200 at a
   time, as the relay's batch), stamping each with `clock_timestamp()`.

Target (the issue): 0 slots held; lateness p99 <= 1 s at the due time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, outlive, table

PAUSE = {"turns": 1, "delayMs": 0, "pauseMs": 3_600_000}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def seed(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(
        "INSERT INTO tenants (slug, name) SELECT 'w-' || i, 'w' || i FROM generate_series(1, $1) i",
        n,
    )
    await conn.execute(
        "INSERT INTO runs (tenant_id, agent, input, dispatched_at, relay_after)"
        " SELECT id, 'demo', $1::jsonb, now(), now() FROM tenants",
        json.dumps(PAUSE),
    )


async def until(conn: asyncpg.Connection, sql: str, target: int, timeout: float) -> float:
    began = time.monotonic()
    while (got := await conn.fetchval(sql)) < target:
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"{sql}: {got} of {target} after {timeout}s")
        await asyncio.sleep(0.2)
    return time.monotonic() - began


async def floor(conn: asyncpg.Connection, n: int, spread: float) -> list[float]:
    await conn.execute(
        "CREATE TEMP TABLE timers (id int PRIMARY KEY, due timestamptz, fired timestamptz)"
    )
    await conn.execute("CREATE INDEX ON timers (due) WHERE fired IS NULL")
    await conn.execute(
        "INSERT INTO timers SELECT i, now() + interval '3 seconds'"
        " + make_interval(secs => $2 * i / $1) FROM generate_series(0, $1 - 1) i",
        n,
        spread,
    )
    while True:
        left = await conn.fetchval(
            "SELECT extract(epoch FROM min(due) - now()) FROM timers WHERE fired IS NULL"
        )
        if left is None:
            break
        if left > 0:
            await asyncio.sleep(float(left) + 0.005)
        await conn.execute(
            "UPDATE timers SET fired = clock_timestamp() WHERE id IN (SELECT id FROM timers"
            " WHERE fired IS NULL AND due <= now() ORDER BY due LIMIT 200 FOR UPDATE SKIP LOCKED)"
        )
    rows = await conn.fetch("SELECT extract(epoch FROM fired - due) AS late FROM timers")
    return [float(r["late"]) for r in rows]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    n = args.runs
    async with bench_env() as env:
        conn = await asyncpg.connect(env.database_url)
        redis = Redis.from_url(env.redis_url)
        await seed(conn, n)
        log = Path("/tmp") / "outlive-bench-waits-worker.log"  # noqa: S108 (a scratch log)
        with outlive("worker", "--concurrency", str(args.concurrency), env=env.vars(), log=log):
            parked_s = await until(
                conn, "SELECT count(*) FROM runs WHERE status = 'WAITING'", n, 900
            )
            await asyncio.sleep(1.0)
            running = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'RUNNING'")
            active = await redis.llen("saq:outlive-runs:active")  # type: ignore[misc]
            await conn.execute(
                "UPDATE runs r SET wake_at = now() + interval '3 seconds'"
                " + make_interval(secs => $2 * (x.i - 1) / $1)"
                " FROM (SELECT id, row_number() OVER (ORDER BY id) AS i FROM runs) x"
                " WHERE r.id = x.id AND r.status = 'WAITING'",
                n,
                args.spread,
            )
            await conn.execute(  # the sleep's record too: its attempt finishes it at `until`
                "UPDATE run_waits w SET until = r.wake_at FROM runs r"
                " WHERE w.run_id = r.id AND w.kind = 'sleep' AND r.status = 'WAITING'"
            )
            await conn.execute(
                "CREATE TEMP TABLE due AS SELECT id, wake_at FROM runs WHERE status = 'WAITING'"
            )
            await until(
                conn,
                "SELECT count(*) FROM run_events WHERE type = 'claimed'"
                " AND (data->>'attempt')::int = 2",
                n,
                600,
            )
        rows = await conn.fetch(
            "SELECT extract(epoch FROM r.at - d.wake_at) AS woke,"
            " extract(epoch FROM c.at - d.wake_at) AS claimed FROM due d"
            " JOIN run_events r ON r.run_id = d.id AND r.type = 'resumed'"
            " JOIN run_events c ON c.run_id = d.id AND c.type = 'claimed'"
            " AND (c.data->>'attempt')::int = 2"
        )
        woke = [float(r["woke"]) for r in rows]
        claimed = [float(r["claimed"]) for r in rows]
        floor_late = await floor(conn, n, args.spread)
        await conn.close()
        await redis.aclose()
    print(f"{n} runs parked in {parked_s:.1f}s by one worker of {args.concurrency} slots")
    print(f"while all {n} were WAITING: RUNNING rows {running}, saq active jobs {active}")
    rows_out = [
        [
            name,
            len(v),
            f"{pct(v, 50) * 1000:.0f}",
            f"{pct(v, 99) * 1000:.0f}",
            f"{max(v) * 1000:.0f}",
            f"{min(v) * 1000:.0f}",
        ]
        for name, v in (
            ("outlive: due -> resumed (relay woke it)", woke),
            ("outlive: due -> claimed again (a slot)", claimed),
            ("floor: bare asyncpg due-row loop", floor_late),
        )
    ]
    print(table(rows_out, ["lateness", "n", "p50 ms", "p99 ms", "max ms", "min ms"]))
    print(
        f"woken per second over the spread: {n / args.spread:.0f}; "
        f"median woke lateness {statistics.median(woke) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
