"""Where a quiet run's start-to-claim goes, for `bench/fairness.py`.

- **Segments** of each quiet run, from its row, its `claimed` event and its saq job record
  (kept an hour after it finished): the API (`createdAt` to the job's `queued`: commit, admission,
  enqueue), the queue (`queued` to the job's `started`: waiting in Redis and the worker's
  dequeue) and the worker (`started` to `claimed`: the run task up to its claim statement).
- **Event-loop lag** of each worker (`outlive_event_loop_lag_seconds`, from its own metrics
  port), as a histogram delta over the phase.
- **Waves** of the flood (`in_waves`): how many of its claims come within 10 ms of each.
- **Warm** processes (`warm`): each worker's start-up over before anything is measured.
"""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from prometheus_client.parser import text_string_to_metric_families

from outlive.jobs.queues import RUNS_QUEUE, create_queue

SEGMENTS = ("api: created to enqueued", "queue: enqueued to started", "worker: started to claimed")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def segments(
    conn: asyncpg.Connection, redis_url: str, tenant: uuid.UUID, since: float
) -> dict[str, list[float]]:
    """Each quiet run's three segments, in ms."""
    rows = await conn.fetch(
        """SELECT r.id, extract(epoch FROM r.created_at) AS created,
                  extract(epoch FROM min(e.at)) AS claimed
             FROM runs r JOIN run_events e ON e.run_id = r.id AND e.type = 'claimed'
            WHERE r.tenant_id = $1 AND r.created_at >= to_timestamp($2) GROUP BY r.id""",
        tenant,
        since,
    )
    found: dict[str, list[float]] = {name: [] for name in SEGMENTS}
    queue = create_queue(redis_url, RUNS_QUEUE)
    try:
        for row in rows:
            job = await queue.job(str(row["id"]))
            if job is None or not job.queued or not job.started:
                continue
            created, claimed = float(row["created"]), float(row["claimed"])
            queued, started = job.queued / 1000, job.started / 1000
            for name, ms in zip(
                SEGMENTS,
                ((queued - created) * 1000, (started - queued) * 1000, (claimed - started) * 1000),
                strict=True,
            ):
                found[name].append(ms)
    finally:
        await queue.disconnect()
    return found


async def in_waves(conn: asyncpg.Connection, tenant: uuid.UUID, since: float) -> float | None:
    """How many other claims of the tenant's runs came within 10 ms of each of them (the
    median): about 2 for 85 runs a second spread evenly, 9 when a capped flood of identical
    turns moves in lockstep (its 10 runs end together, and the next 10 start together); a
    quiet run that arrives in such a wave waits for it."""
    near = await conn.fetchval(
        """WITH claims AS (
               SELECT min(e.at) AS at FROM runs r
                 JOIN run_events e ON e.run_id = r.id AND e.type = 'claimed'
                WHERE r.tenant_id = $1 AND r.created_at >= to_timestamp($2) GROUP BY r.id),
           near AS (
               SELECT count(*) OVER (ORDER BY at RANGE BETWEEN interval '10 ms' PRECEDING
                                                  AND interval '10 ms' FOLLOWING) - 1 AS n
                 FROM claims)
           SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY n) FROM near""",
        tenant,
        since,
    )
    return None if near is None else float(near)


async def warm(logs: list[Path], timeout: float = 300) -> None:
    """Each worker's start-up over (its log's `worker warm`): until then a thread importing
    its agents' modules, and the full collection after it, share the process with its loop.
    Before 2026-12-07 phase 1 could begin while they ran, and then its p99 (the idle figure
    every ratio divides by) was that of the start-up's stalls, not of a quiet machine."""
    async with asyncio.timeout(timeout):
        while not all(b"worker warm" in log.read_bytes() for log in logs):
            await asyncio.sleep(0.05)  # a log file: nothing to await


@dataclass
class Lag:
    """Cumulative `outlive_event_loop_lag_seconds` buckets of the workers: upper bound -> count."""

    ports: list[int]
    last: dict[float, float] = field(default_factory=dict)

    gc_last: tuple[float, float] = (0.0, 0.0)
    gc2: tuple[float, float] = (0.0, 0.0)  # full collections over the last phase: count, seconds

    async def read(self) -> dict[float, float]:
        total: dict[float, float] = {}
        gc_count = gc_sum = 0.0
        for port in self.ports:
            text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if family.name == "outlive_event_loop_lag_seconds" and "le" in s.labels:
                        le = float(s.labels["le"])
                        total[le] = total.get(le, 0.0) + s.value
                    elif family.name == "outlive_gc_pause_seconds":
                        if s.labels.get("generation") != "2":
                            continue
                        gc_count += s.value if s.name.endswith("_count") else 0.0
                        gc_sum += s.value if s.name.endswith("_sum") else 0.0
        self.gc2 = (gc_count - self.gc_last[0], gc_sum - self.gc_last[1])
        self.gc_last = (gc_count, gc_sum)
        return total

    async def since_last(self) -> tuple[float | None, float | None, float]:
        """(p50, p99) of the lag over the ticks since the last call, in ms (a bucket's upper
        bound), and the ticks' count. `gc2` then holds the full collections since then."""
        now = await self.read()
        delta = {le: now[le] - self.last.get(le, 0.0) for le in now}
        self.last = now
        ticks = delta.get(float("inf"), 0.0)
        if not ticks:
            return None, None, 0.0
        return _bound(delta, ticks * 0.5), _bound(delta, ticks * 0.99), ticks


def _bound(cumulative: dict[float, float], rank: float) -> float:
    for le in sorted(cumulative):
        if cumulative[le] >= rank:
            return le * 1000
    return float("inf")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback)
        return str(response.read().decode())
