"""Retention: delete what is settled and older than `OUTLIVE_RETENTION_DAYS`, in small batches.

Each batch is its own short transaction (a few hundred rows), so a large table never holds a long
lock and the work can stop and resume anywhere. Runs take their timeline with them (ON DELETE
CASCADE); webhook deliveries, rejected jobs and finished replays are pruned by age. Active runs
and pending deliveries are never touched. Signals a settled run never took are deleted soon
after it settles (`prune_settled_signals`, every 5 minutes): a run keeps at most its mailbox's
bounds while it is active, and nothing after, so a tenant cannot pile them up by settling runs.
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

_PRUNE_REPLAYS = prepare(
    text(
        """DELETE FROM run_replays WHERE id IN (
         SELECT id FROM run_replays WHERE status <> 'RUNNING'
           AND created_at < now() - make_interval(days => :days)
         LIMIT :batch FOR UPDATE SKIP LOCKED)"""
    )
)
# Signals kept for a run that settled: nobody will take them (a settled run accepts none).
_PRUNE_SETTLED_SIGNALS = prepare(
    text(
        """DELETE FROM run_signals WHERE seq IN (
         SELECT s.seq FROM run_signals s JOIN runs r ON r.id = s.run_id
          WHERE s.delivered_at IS NULL
            AND r.status NOT IN ('QUEUED', 'RUNNING', 'WAITING')
          LIMIT :batch FOR UPDATE OF s SKIP LOCKED)"""
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


async def prune_replays(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_REPLAYS, days, batch)


async def prune_settled_signals(sessions: Sessions, *, batch: int = BATCH) -> int:
    total = 0
    while True:
        deleted = await sessions.execute(_PRUNE_SETTLED_SIGNALS, batch=batch)
        total += deleted
        if deleted < batch:
            return total
