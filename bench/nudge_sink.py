"""Benchmark: the nudge sink of a busy worker, queued (`Publisher.defer`) beside awaited.

    uv run python bench/nudge_sink.py [--units 200] [--rounds 5]

32 tasks (a worker's 32 runs in flight) each commit `--units` units of work in a row, one
`run.event` nudge a unit, as a 10-step workflow's steps do. Two sinks, rounds alternating in one
process against the same Redis:

- awaited: what a worker did until 2026-12-07, `await publisher.send(nudges)` after each commit
  (a pipeline per unit, its round trip on the step's path);
- queued: `await publisher.defer(nudges)`, the sink of every process now (the nudges join the
  process's queue; one sender puts what queued up behind a send in flight in one pipeline), then
  `drain()` so that every nudge has reached Redis before the clock stops.

Printed: the wall time a unit's sink took on its task's path (p50, p99), the process's CPU per
nudge (the client's whole cost: encoding, pipelines, the socket writes, the event loop), and
PUBLISHes Redis counted (`INFO commandstats`), which must equal the nudges sent in both modes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BASE_REDIS, table
from redis.asyncio import Redis

from outlive.realtime.nudges import Nudge, Publisher

TASKS = 32


async def publishes(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_publish", {}).get("calls", 0))


async def one_round(redis: Redis, queued: bool, units: int) -> dict[str, float]:
    publisher = Publisher(redis, prefix=f"bench:nudge-sink:{uuid.uuid4().hex}:")
    tenant = uuid.uuid4()
    waits: list[float] = []

    async def worker_task() -> None:
        run = uuid.uuid4()
        for _ in range(units):
            nudges = [Nudge("run.event", tenant, datetime.now(UTC), run)]
            began = time.perf_counter()
            if queued:
                await publisher.defer(nudges)
            else:
                await publisher.send(nudges)
            waits.append(time.perf_counter() - began)
            await asyncio.sleep(0)  # the unit's next statement: the loop turns

    before = await publishes(redis)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker_task() for _ in range(TASKS)))
    await publisher.drain()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    sent = TASKS * units
    counted = await publishes(redis) - before
    if counted != sent or publisher.sent != sent:
        raise RuntimeError(f"{sent} nudges, {publisher.sent} sent, {counted} PUBLISHes counted")
    waits.sort()
    return {
        "p50_us": waits[len(waits) // 2] * 1e6,
        "p99_us": waits[int(len(waits) * 0.99)] * 1e6,
        "cpu_us": cpu / sent * 1e6,
        "per_s": sent / wall,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    redis = Redis.from_url(BASE_REDIS)
    results: dict[str, list[dict[str, float]]] = {"awaited": [], "queued": []}
    try:
        await one_round(redis, True, 20)  # warm: connections, imports
        for i in range(args.rounds):
            order = ("awaited", "queued") if i % 2 == 0 else ("queued", "awaited")
            for mode in order:
                results[mode].append(await one_round(redis, mode == "queued", args.units))
    finally:
        await redis.aclose()
    rows = []
    for key, label in (
        ("p50_us", "the sink on a unit's path, p50 (µs)"),
        ("p99_us", "the sink on a unit's path, p99 (µs)"),
        ("cpu_us", "process CPU per nudge (µs)"),
        ("per_s", "nudges/s, to the last one in Redis"),
    ):
        cells = []
        for mode in ("awaited", "queued"):
            values = [r[key] for r in results[mode]]
            cells.append(f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
        rows.append([label, *cells])
    print(
        f"{TASKS} tasks x {args.units} units, 1 nudge a unit; {args.rounds} rounds, medians (range)"
    )
    print(table(rows, ["measure", "awaited (before)", "queued (now)"]))


if __name__ == "__main__":
    asyncio.run(main())
