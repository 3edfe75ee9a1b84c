"""Benchmark: the schedules' clock with 10,000 schedules: its CPU per fire, and fire lateness.

    uv run python bench/schedules.py [--schedules 10000] [--tenants 100] [--minutes 1]

N schedules (`* * * * *`, ENQUEUE, a 59 s jitter, so their fire times spread over each minute)
over T tenants, written by SQL with the cursor the service computes (`createSchedule`'s path is
one INSERT; what is measured is the clock). The clock runs in this process exactly as a
worker's relay runs it: sleep until the earliest fire (`NEXT`'s clock), then `fire_due` with the
relay's batch (200), tenant by tenant. For `--minutes` minutes of fires:

- clock CPU per fire: this process's CPU time (`time.process_time`) spent in `fire_due`,
  divided by the occurrences it started (PostgreSQL's own time is not in it: see wall per fire);
- wall per fire: the time in `fire_due` divided by the same;
- fire lateness: each run's `created_at` (the firing transaction's clock) minus its fire time
  (occurrence + jitter), p50 / p99 / max.

No worker runs: the runs it starts wait for their tenant's dispatch (admission is measured by
bench/fairness.py). The figures are for one clock; more workers share the fires
(`FOR UPDATE SKIP LOCKED`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, table

from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.jobs.run_instances import SaqRunInstances
from outlive.services.relay.queries import NEXT
from outlive.services.schedules import cron
from outlive.services.schedules.fires import fire_due

JITTER_S = 59
INPUT = json.dumps({"turns": 1, "delayMs": 0})


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def seed(conn: asyncpg.Connection, schedules: int, tenants: int) -> datetime:
    """The schedules, their first occurrence the next minute; that minute's start."""
    await conn.execute(
        "INSERT INTO tenants (slug, name) SELECT 's-' || i, 's' || i FROM generate_series(1, $1) i",
        tenants,
    )
    tenant_ids = [r["id"] for r in await conn.fetch("SELECT id FROM tenants ORDER BY slug")]
    now: datetime = await conn.fetchval("SELECT now()")
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    rows = []
    for i in range(schedules):
        schedule_id = uuid.uuid4()
        fire_at = first + cron.jitter(schedule_id, first, JITTER_S)
        rows.append(
            (
                schedule_id,
                tenant_ids[i % tenants],
                "demo",
                "* * * * *",
                "UTC",
                INPUT,
                f"schedule:{schedule_id}",
                "ENQUEUE",
                JITTER_S,
                first,
                fire_at,
            )
        )
    await conn.executemany(
        "INSERT INTO schedules (id, tenant_id, agent, cron, timezone, input, key, on_conflict,"
        " jitter_seconds, next_occurrence, next_fire_at)"
        " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11)",
        rows,
    )
    return first


async def clock(database_url: str, redis_url: str, until: datetime) -> tuple[int, float, float]:
    """Run the clock until `until`: (fires, CPU seconds, wall seconds) spent in `fire_due`."""
    settings = Settings(database_url=database_url, redis_url=redis_url)
    engine = create_engine(database_url)
    sessions = create_sessions(engine)
    queue = create_queue(redis_url, RUNS_QUEUE)
    instances = SaqRunInstances(queue, settings)
    fired, cpu, wall = 0, 0.0, 0.0
    try:
        while datetime.now(UTC) < until:
            row = await sessions.one(NEXT, lead=0.0, ahead_s=0.0)
            wait = 0.0 if row is None or row["clock_s"] is None else float(row["clock_s"])
            if wait > 0:
                await asyncio.sleep(min(wait, 1.0) + 0.005)
                continue
            began_cpu, began = time.process_time(), time.perf_counter()
            fired += await fire_due(sessions, instances, 200)
            cpu += time.process_time() - began_cpu
            wall += time.perf_counter() - began
    finally:
        await queue.disconnect()
        await engine.dispose()
    return fired, cpu, wall


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--minutes", type=int, default=1)
    args = parser.parse_args()
    async with bench_env() as env:
        conn = await asyncpg.connect(env.database_url)
        first = await seed(conn, args.schedules, args.tenants)
        end = first + timedelta(minutes=args.minutes)
        fired, cpu, wall = await clock(env.database_url, env.redis_url, end)
        rows = await conn.fetch(
            "SELECT schedule_id, scheduled_for, created_at FROM runs WHERE scheduled_for < $1",
            end,
        )
        await conn.close()
    late = [
        (
            r["created_at"]
            - (r["scheduled_for"] + cron.jitter(r["schedule_id"], r["scheduled_for"], JITTER_S))
        ).total_seconds()
        for r in rows
    ]
    expected = args.schedules * args.minutes
    print(f"{args.schedules} schedules over {args.tenants} tenants, {args.minutes} minute(s):")
    print(f"  runs started: {len(rows)} of {expected} occurrences ({fired} fires in all)")
    print(
        table(
            [
                ["clock CPU per fire (this process)", f"{cpu / max(fired, 1) * 1e6:.0f} us"],
                ["wall in fire_due per fire", f"{wall / max(fired, 1) * 1e3:.2f} ms"],
                ["fires per second (average)", f"{fired / (60 * args.minutes):.0f}"],
                ["fire lateness p50", f"{pct(late, 50) * 1000:.0f} ms"],
                ["fire lateness p99", f"{pct(late, 99) * 1000:.0f} ms"],
                ["fire lateness max", f"{max(late) * 1000:.0f} ms"],
            ],
            ["figure", "value"],
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
