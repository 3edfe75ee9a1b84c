"""The noisy neighbour's schedules, for `bench/fairness.py` (issue 44).

The noisy tenant gets N schedules (`* * * * *`, no jitter by default: every one is due at the
same instant, the worst case for the clock) written by SQL with the cursor `createSchedule`
computes, since the per-tenant cap (`OUTLIVE_TENANT_MAX_SCHEDULES`, 1,000 by default) is what
the bench lifts to flood the clock. The workers' relays fire them, as they do in production.
Once one minute's occurrences have all fired, the schedules are paused (so the phase measures
one burst of N fires and N runs), and the phase lasts until those runs have settled.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime, timedelta

import asyncpg

from outlive.services.schedules import cron

LEAD = timedelta(seconds=15)  # time to write the schedules before their first occurrence


async def seed(
    conn: asyncpg.Connection, tenant: uuid.UUID, count: int, delay_ms: int, jitter_s: int
) -> datetime:
    """`count` schedules of `tenant`, all first due at the next minute at least `LEAD` away;
    that occurrence."""
    now: datetime = await conn.fetchval("SELECT now()")
    first = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if first - now < LEAD:
        first += timedelta(minutes=1)
    run_input = json.dumps({"turns": 1, "delayMs": delay_ms})
    rows = []
    for _ in range(count):
        schedule_id = uuid.uuid4()
        fire_at = first + cron.jitter(schedule_id, first, jitter_s)
        key = f"schedule:{schedule_id}"
        rows.append((schedule_id, tenant, "* * * * *", run_input, key, jitter_s, first, fire_at))
    await conn.executemany(
        "INSERT INTO schedules (id, tenant_id, agent, cron, timezone, input, key, on_conflict,"
        " jitter_seconds, next_occurrence, next_fire_at)"
        " VALUES ($1, $2, 'demo', $3, 'UTC', $4::jsonb, $5, 'REJECT', $6, $7, $8)",
        rows,
    )
    return first


async def until(conn: asyncpg.Connection, at: datetime) -> None:
    """Sleep until the database's clock reads `at`."""
    left = await conn.fetchval("SELECT extract(epoch FROM $1 - now())", at)
    await asyncio.sleep(max(0.0, float(left)))


async def fired(conn: asyncpg.Connection, tenant: uuid.UUID, first: datetime, count: int) -> None:
    """Wait until the occurrence `first` of all `count` schedules has started its run, then
    pause the schedules (their next minute would be another burst)."""
    while (
        await conn.fetchval(
            "SELECT count(*) FROM runs WHERE tenant_id = $1 AND scheduled_for = $2", tenant, first
        )
        < count
    ):
        await asyncio.sleep(0.1)  # a poll of the database: the benchmark has no socket
    await conn.execute(
        "UPDATE schedules SET paused_at = now(), next_occurrence = NULL, next_fire_at = NULL"
        " WHERE tenant_id = $1",
        tenant,
    )


async def lateness_ms(conn: asyncpg.Connection, tenant: uuid.UUID, first: datetime) -> list[float]:
    """Each run's start (its `created_at`, the firing transaction's clock) minus its fire time."""
    rows = await conn.fetch(
        "SELECT r.created_at, s.id, s.jitter_seconds FROM runs r JOIN schedules s"
        " ON s.id = r.schedule_id WHERE r.tenant_id = $1 AND r.scheduled_for = $2",
        tenant,
        first,
    )
    return sorted(
        (r["created_at"] - first - cron.jitter(r["id"], first, r["jitter_seconds"])).total_seconds()
        * 1000
        for r in rows
    )
