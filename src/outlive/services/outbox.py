"""The outbox: the kinds of row whose PENDING state is a job to send, declared once.

A webhook delivery and an invitation are both outbox rows: written PENDING in the unit that
made them, sent by a job of their own (`webhook.deliver.v1`, `email.invitation.v1`) whose
envelope id is derived from (type, row id), so that enqueueing one twice is a no-op while it is
queued, waiting for a retry or running. `KINDS` is the registry, each `OutboxKind` naming its
table, its job and the statuses of its lifecycle; everything that handles outbox rows reads it:

- admission (`outlive_dispatch_jobs`, PL/pgSQL, whose kinds and tables
  `tests/db/test_functions.py` checks against this registry) admits the oldest waiting rows of
  every kind under the tenant's jobs cap, and `services.admission` enqueues them (`job`);
- the relay (`services.relay.queries`) hands the admitted rows that are due, marks them due when
  the queue lost its data, and makes up for missed dispatches, table by table from `KINDS`;
- repair on read (`requeue_stale`): a PENDING row that has not moved for a while is enqueued
  again (or, still waiting for its tenant's cap, makes its tenant dispatch), and only a row
  whose job was lost is sent again;
- the lifecycle (`record_attempt`, `finish`): a try that failed is counted on the row, which
  stays PENDING; the last one makes it `done` (DELIVERED, SENT) or FAILED, only from PENDING (a
  redelivered job finds nothing to do), and frees its slot under the tenant's cap. A kind with an
  attempt log (`log`: webhook deliveries) gets one row per counted attempt (`Attempt`: status,
  body excerpt, error, when, how long) in the same statement's unit, and keeps the newest
  `log_kept` of them.

Adding a kind: its table (a model and a migration, with `status`, `attempts`, `last_error`,
`dispatched_at`, `relay_after`, `updated_at`), an entry here, its job (an envelope and a handler
in `outlive.jobs`), and its branch in `db/functions/outlive_dispatch_jobs.sql` (a migration
loads the new version).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from sqlalchemy import text

from outlive.db.models.webhooks import ATTEMPT_ERROR_CHARS, ATTEMPTS_KEPT
from outlive.db.ports import Admission, JobProducer
from outlive.db.raw import Statement, prepare
from outlive.db.tx import Unit
from outlive.errors import QueueUnavailable

log = logging.getLogger(__name__)

PENDING = "PENDING"  # written, and until it is done: the row is its own job
FAILED = "FAILED"  # given up (the last attempt failed, or it could not be queued)


@dataclass(frozen=True)
class OutboxKind:
    """One kind of outbox row. Its table has `id`, `tenant_id`, `status`, `attempts`,
    `last_error`, `dispatched_at` (NULL: waiting for a slot), `relay_after` and `updated_at`."""

    kind: str  # as the dispatch function and the relay name it
    table: str
    job: str  # the job type that sends one row, keyed by the row
    id_field: str  # the field of the job's payload that carries the row's id
    done: str  # the status of a row sent
    done_at: str  # the column stamped when it is done
    nudge: str  # what a change of the row announces
    extra: tuple[tuple[str, str], ...] = ()  # (column, SQL type) an attempt records as well
    cleared: tuple[str, ...] = ()  # columns its end sets NULL (a retry that will not come)
    log: tuple[str, str] | None = None  # (table, column of the row's id): its attempts' log
    log_kept: int = 0  # the newest this-many attempts of a row are kept in `log`

    def envelope(self, jobs: JobProducer, row_id: UUID) -> Any:
        """The row's job, keyed by the row."""
        return jobs.build(self.job, {self.id_field: str(row_id)}, key=str(row_id))


WEBHOOK = OutboxKind(
    kind="webhook",
    table="webhook_deliveries",
    job="webhook.deliver.v1",
    id_field="deliveryId",
    done="DELIVERED",
    done_at="delivered_at",
    nudge="webhook.delivery.updated",
    extra=(("response_status", "int"),),
    cleared=("next_attempt_at",),
    log=("webhook_delivery_attempts", "delivery_id"),
    log_kept=ATTEMPTS_KEPT,
)
INVITATION = OutboxKind(
    kind="invitation",
    table="invitations",
    job="email.invitation.v1",
    id_field="invitationId",
    done="SENT",
    done_at="sent_at",
    nudge="invitation.updated",
)
KINDS: tuple[OutboxKind, ...] = (WEBHOOK, INVITATION)
BY_KIND = {k.kind: k for k in KINDS}


class OutboxRow(Protocol):
    @property
    def id(self) -> UUID: ...
    @property
    def tenant_id(self) -> UUID: ...
    @property
    def status(self) -> str: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def dispatched_at(self) -> datetime | None: ...


def job(jobs: JobProducer, kind: str, row_id: UUID) -> Any:
    """The job of a row of `kind` (as the dispatch function names it), keyed by the row."""
    return BY_KIND[kind].envelope(jobs, row_id)


# --- the lifecycle of a PENDING row -----------------------------------------------------------


def _logged(k: OutboxKind, update: str) -> str:
    """`update` (RETURNING tenant_id, attempts), and for a kind with a log the counted attempt
    logged by the same statement (when `:log`), the row's attempts older than the newest
    `k.log_kept` out of the log (its bound): one statement, as the lifecycle was before the log."""
    if k.log is None:
        return update
    table, key = k.log
    return (
        f"WITH moved AS ({update}),"  # noqa: S608 (constants)
        f" logged AS (INSERT INTO {table} ({key}, attempt, tenant_id, response_status,"
        " body_excerpt, error, started_at, duration_ms)"
        " SELECT CAST(:row_id AS uuid), attempts, tenant_id, CAST(:log_status AS int),"
        f" CAST(:log_body AS text), left(CAST(:error AS text), {ATTEMPT_ERROR_CHARS}),"
        " CAST(:log_started_at AS timestamptz), CAST(:log_duration_ms AS int) FROM moved"
        " WHERE CAST(:log AS boolean) ON CONFLICT DO NOTHING),"
        f" pruned AS (DELETE FROM {table} WHERE {key} = :row_id AND CAST(:log AS boolean)"
        f" AND attempt <= (SELECT attempts FROM moved) - {k.log_kept})"
        " SELECT tenant_id, attempts FROM moved"
    )


def _attempt_statement(k: OutboxKind) -> Statement:
    extra = "".join(f" {column} = CAST(:{column} AS {type})," for column, type in k.extra)
    update = (
        f"UPDATE {k.table} SET attempts = attempts + 1,{extra}"  # noqa: S608 (constants)
        " last_error = CAST(:error AS text), updated_at = now()"
        f" WHERE id = :row_id AND status = '{PENDING}' RETURNING tenant_id, attempts"
    )
    return prepare(text(_logged(k, update)))


def _finish_statement(k: OutboxKind) -> Statement:
    """`done` or FAILED, only from PENDING; NULLs keep what the row has. A row done has no
    `last_error`: the error of a try that came before is in its attempt log, not on a
    delivered row (issue 45: "the last error cleared once delivered")."""
    extra = "".join(
        f" {column} = coalesce(CAST(:{column} AS {type}), {column})," for column, type in k.extra
    )
    cleared = "".join(f" {column} = NULL," for column in k.cleared)
    update = (
        f"UPDATE {k.table} SET status = CAST(:status AS text), updated_at = now(),"  # noqa: S608
        " attempts = attempts + CAST(CAST(:count_attempt AS boolean) AS int),"
        f"{extra}{cleared} last_error = CASE WHEN CAST(:status AS text) = '{k.done}' THEN NULL"
        " ELSE coalesce(CAST(:error AS text), last_error) END,"
        f" {k.done_at} = CASE WHEN CAST(:status AS text) = '{k.done}' THEN now()"
        f" ELSE {k.done_at} END"
        f" WHERE id = :row_id AND status = '{PENDING}' RETURNING tenant_id, attempts"
    )
    return prepare(text(_logged(k, update)))


_ATTEMPT = {k.kind: _attempt_statement(k) for k in KINDS}
_FINISH = {k.kind: _finish_statement(k) for k in KINDS}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try, as a kind with a log records it (its error is the lifecycle's `error`)."""

    started_at: datetime
    duration_ms: int
    response_status: int | None = None
    body_excerpt: str | None = None


def _log_params(k: OutboxKind, attempt: Attempt | None) -> dict[str, Any]:
    """The log's parameters of a kind's statements (none for a kind without a log); `log` is
    whether this attempt is logged."""
    if k.log is None:
        return {}
    return {
        "log": attempt is not None,
        "log_status": attempt.response_status if attempt else None,
        "log_body": attempt.body_excerpt if attempt else None,
        "log_started_at": attempt.started_at if attempt else None,
        "log_duration_ms": attempt.duration_ms if attempt else None,
    }


async def record_attempt(
    uow: Unit,
    k: OutboxKind,
    row_id: UUID,
    *,
    error: str | None,
    attempt: Attempt | None = None,
    **extra: Any,
) -> None:
    """A try that did not succeed: counted, with its error (and `extra` columns), and logged
    (`attempt`, for a kind with a log); the row stays PENDING for the next one."""
    row = await uow.one(
        _ATTEMPT[k.kind], row_id=row_id, error=error, **extra, **_log_params(k, attempt)
    )
    if row is not None:
        uow.nudge(k.nudge, row_id, tenant_id=row["tenant_id"])


async def finish(
    uow: Unit,
    k: OutboxKind,
    row_id: UUID,
    *,
    status: str,
    error: str | None = None,
    count_attempt: bool = False,
    dispatch: bool = True,
    attempt: Attempt | None = None,
    **extra: Any,
) -> bool:
    """`k.done` or FAILED, only from PENDING: a redelivered job finds nothing to do (False). Its
    slot under the tenant's jobs cap is free then (`dispatch`: the tenant's next waiting row is
    admitted after the commit; an unreachable queue leaves it to the relay). A counted attempt
    is logged (`attempt`, for a kind with a log)."""
    row = await uow.one(
        _FINISH[k.kind],
        row_id=row_id,
        status=status,
        error=error,
        count_attempt=count_attempt,
        **{column: extra.get(column) for column, _ in k.extra},
        **_log_params(k, attempt if count_attempt else None),
    )
    if row is None:
        return False
    tenant_id = row["tenant_id"]
    uow.nudge(k.nudge, row_id, tenant_id=tenant_id)
    if dispatch:
        uow.admit_after_commit(tenant_id, "jobs", queue_down_raises=False)
    return True


# --- repair on read ----------------------------------------------------------------------------


async def requeue_stale(
    kind: str,
    rows: Sequence[OutboxRow],
    *,
    jobs: JobProducer,
    admission: Admission,
    grace_s: float,
) -> int:
    """Repair on read: each PENDING row not updated for `grace_s` is enqueued again (a no-op while
    its job is alive), or, still waiting for its tenant's cap, makes its tenant dispatch."""
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    stale = [r for r in rows if r.status == PENDING and r.updated_at < cutoff]
    if not stale:
        return 0
    admitted = [r for r in stale if r.dispatched_at is not None]
    try:
        if admitted:
            await jobs.send([job(jobs, kind, r.id) for r in admitted])
        for tenant_id in {r.tenant_id for r in stale if r.dispatched_at is None}:
            await admission.dispatch_jobs(tenant_id)
    except QueueUnavailable:
        log.warning(
            "cannot re-enqueue %d stale %s rows: the queue is unreachable", len(stale), kind
        )
        return 0
    return len(stale)


async def deliveries_with_repair(
    deliveries: Sequence[OutboxRow], *, jobs: JobProducer, admission: Admission, grace_s: float
) -> Sequence[OutboxRow]:
    """Webhook deliveries as read, with the stale pending ones requeued (`requeue_stale`)."""
    await requeue_stale(WEBHOOK.kind, deliveries, jobs=jobs, admission=admission, grace_s=grace_s)
    return deliveries
