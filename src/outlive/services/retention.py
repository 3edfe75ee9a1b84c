"""Retention: delete what is settled and older than `OUTLIVE_RETENTION_DAYS`, in small batches.

Each batch is its own short transaction (a few hundred rows), so a large table never holds a long
lock and the work can stop and resume anywhere. Runs take their timeline with them (ON DELETE
CASCADE); webhook deliveries and rejected jobs are pruned by age. Active runs and pending
deliveries are never touched.
"""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.raw import Statement, prepare
from outlive.db.tx import Sessions

BATCH = 500

_PRUNE_RUNS = prepare(
    text(
        """DELETE FROM runs WHERE id IN (
         SELECT id FROM runs WHERE status NOT IN ('QUEUED', 'RUNNING')
           AND finished_at < now() - make_interval(days => :days)
         LIMIT :batch FOR UPDATE SKIP LOCKED)"""
    )
)
_PRUNE_DELIVERIES = prepare(
    text(
        """DELETE FROM webhook_deliveries WHERE id IN (
         SELECT id FROM webhook_deliveries WHERE status <> 'PENDING'
           AND created_at < now() - make_interval(days => :days)
         LIMIT :batch FOR UPDATE SKIP LOCKED)"""
    )
)
_PRUNE_REJECTED = prepare(
    text(
        """DELETE FROM rejected_jobs WHERE id IN (
         SELECT id FROM rejected_jobs WHERE received_at < now() - make_interval(days => :days)
         LIMIT :batch FOR UPDATE SKIP LOCKED)"""
    )
)


async def _prune(sessions: Sessions, statement: Statement, days: int, batch: int) -> int:
    total = 0
    while True:  # each batch is one statement: atomic on its own, committed at once
        deleted = await sessions.execute(statement, days=days, batch=batch)
        total += deleted
        if deleted < batch:
            return total


async def prune_runs(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_RUNS, days, batch)


async def prune_deliveries(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_DELIVERIES, days, batch)


async def prune_rejected_jobs(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_REJECTED, days, batch)
