"""Retention: delete what is settled and older than the tenant's retention, in small batches.

A tenant keeps its settled runs `setRetention(days)` days (`tenants.retention_days`), or
`OUTLIVE_RETENTION_DAYS` when it set none. Each batch is one statement and its own short
transaction (`BATCH` runs, their timelines and steps with them by ON DELETE CASCADE), so a large
table never holds a long lock, no statement comes near the statement timeout, and the work can
stop and resume anywhere. The statement that deletes runs folds what they counted into the kept
usage (`outlive.services.kept_usage`): usage totals never change when runs go. Tenants with a
retention of their own are pruned one at a time (their runs found by `(tenant_id, created_at)`:
a run finished before a cutoff was created before it), then every other tenant's by the
deployment's days (found by `finished_at`); a tenant's rows are only ever deleted by its own
cutoff. Webhook deliveries, rejected jobs and finished replays are pruned by age. Active runs and
pending deliveries are never touched. Signals a settled run never took are deleted soon after
it settles (`prune_settled_signals`, every 5 minutes): a run keeps at most its mailbox's bounds
while it is active, and nothing after, so a tenant cannot pile them up by settling runs.
Blobs (`outlive.services.blobs`) no run holds any more are swept after the runs.
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import text

from outlive.db.raw import Statement, prepare
from outlive.db.tx import Db, Sessions
from outlive.errors import BadUserInput
from outlive.services import blobs
from outlive.services.kept_usage import KEEP_RUNS, KEEP_STEPS, STEP_COLUMNS

BATCH = 500
RUN_BATCH = 200  # runs per statement: each takes its steps and events with it
MIN_DAYS, MAX_DAYS = 1, 3650
_SETTLED = "r.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"


def _delete_runs(doomed: str) -> Statement:
    """One batch: the runs `doomed` selects (ids, locked), deleted with what they counted kept."""
    return prepare(
        text(
            f"""WITH doomed AS ({doomed}),
              owners AS (SELECT r.id, r.tenant_id, r.agent
                           FROM runs r JOIN doomed d ON d.id = r.id),
              gone AS (SELECT {STEP_COLUMNS} FROM run_steps
                        WHERE run_id IN (SELECT id FROM doomed)),
              {KEEP_STEPS},
              dead AS (DELETE FROM runs WHERE id IN (SELECT id FROM doomed)
                       RETURNING tenant_id, created_at, agent, status),
              {KEEP_RUNS}
            SELECT count(*) AS n FROM dead"""  # noqa: S608 (constant fragments)
        )
    )


_PRUNE_TENANT_RUNS = _delete_runs(
    f"""SELECT r.id FROM runs r WHERE r.tenant_id = :tenant_id AND {_SETTLED}
         AND r.created_at < now() - make_interval(days => :days)
         AND r.finished_at < now() - make_interval(days => :days)
       LIMIT :batch FOR UPDATE SKIP LOCKED"""  # noqa: S608 (a constant)
)
_PRUNE_DEFAULT_RUNS = _delete_runs(
    f"""SELECT r.id FROM runs r JOIN tenants t ON t.id = r.tenant_id
        WHERE {_SETTLED} AND t.retention_days IS NULL
          AND r.finished_at < now() - make_interval(days => :days)
        LIMIT :batch FOR UPDATE OF r SKIP LOCKED"""  # noqa: S608 (a constant)
)
_OWN_RETENTION = prepare(
    text("SELECT id, retention_days FROM tenants WHERE retention_days IS NOT NULL ORDER BY id")
)
_SET_RETENTION = prepare(
    text(
        "UPDATE tenants SET retention_days = :days WHERE id = :tenant_id"
        " RETURNING id, slug, name, retention_days"
    )
)
_SET_RETENTION_BY_SLUG = prepare(
    text(
        "UPDATE tenants SET retention_days = :days WHERE slug = :slug"
        " RETURNING id, slug, name, retention_days"
    )
)
_RETENTION_OF = prepare(text("SELECT retention_days FROM tenants WHERE id = :tenant_id"))
_TENANT_BY_SLUG = prepare(text("SELECT id FROM tenants WHERE slug = :slug"))
# A delivery goes by its tenant's retention too (its body carries the run's output); `:least`
# (the shortest retention of any tenant) bounds the scan of the created_at index.
_PRUNE_DELIVERIES = prepare(
    text(
        """DELETE FROM webhook_deliveries WHERE id IN (
         SELECT w.id FROM webhook_deliveries w JOIN tenants t ON t.id = w.tenant_id
          WHERE w.status <> 'PENDING'
            AND w.created_at < now() - make_interval(days => :least)
            AND w.created_at < now() - make_interval(days => coalesce(t.retention_days, :days))
         LIMIT :batch FOR UPDATE OF w SKIP LOCKED)"""
    )
)
_LEAST = prepare(text("SELECT least(min(retention_days), :days) AS days FROM tenants"))
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


def check_days(days: int) -> int:
    if not MIN_DAYS <= days <= MAX_DAYS:
        raise BadUserInput(f"days must be between {MIN_DAYS} and {MAX_DAYS}")
    return days


async def set_retention(db: Db, tenant_id: UUID, days: int) -> None:
    """`setRetention`: the tenant's settled runs are kept `days` days (1 to 3650)."""
    await db.execute(_SET_RETENTION, tenant_id=tenant_id, days=check_days(days))


async def set_retention_by_slug(db: Db, slug: str, days: int) -> bool:
    """`outlive tenant set-retention`: False when there is no such tenant."""
    return await db.one(_SET_RETENTION_BY_SLUG, slug=slug, days=check_days(days)) is not None


async def tenant_by_slug(db: Db, slug: str) -> UUID | None:
    row = await db.one(_TENANT_BY_SLUG, slug=slug)
    return None if row is None else UUID(str(row["id"]))


async def retention_of(db: Db, tenant_id: UUID, default: int) -> int:
    row = await db.one(_RETENTION_OF, tenant_id=tenant_id)
    return default if row is None or row["retention_days"] is None else row["retention_days"]


async def _prune(sessions: Sessions, statement: Statement, batch: int, **params: object) -> int:
    total = 0
    while True:  # each batch is one statement: atomic on its own, committed at once
        deleted = await sessions.execute(statement, batch=batch, **params)
        total += deleted
        if deleted < batch:
            return total


async def _prune_runs_batches(
    sessions: Sessions, statement: Statement, batch: int, **params: object
) -> int:
    total = 0
    while True:
        row = await sessions.one(statement, batch=batch, **params)
        deleted = 0 if row is None else int(row["n"])
        total += deleted
        if deleted < batch:
            return total


async def prune_runs(sessions: Sessions, *, days: int, batch: int = RUN_BATCH) -> int:
    """Every tenant's settled runs past its retention (`days`: the deployment's default)."""
    total = 0
    for tenant in await sessions.all(_OWN_RETENTION):
        total += await _prune_runs_batches(
            sessions,
            _PRUNE_TENANT_RUNS,
            batch,
            tenant_id=tenant["id"],
            days=tenant["retention_days"],
        )
    total += await _prune_runs_batches(sessions, _PRUNE_DEFAULT_RUNS, batch, days=days)
    await blobs.sweep(sessions)
    return total


async def prune_deliveries(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    row = await sessions.one(_LEAST, days=days)
    least = days if row is None or row["days"] is None else int(row["days"])
    return await _prune(sessions, _PRUNE_DELIVERIES, batch, days=days, least=least)


async def prune_rejected_jobs(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_REJECTED, batch, days=days)


async def prune_replays(sessions: Sessions, *, days: int, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_REPLAYS, batch, days=days)


async def prune_settled_signals(sessions: Sessions, *, batch: int = BATCH) -> int:
    return await _prune(sessions, _PRUNE_SETTLED_SIGNALS, batch)
