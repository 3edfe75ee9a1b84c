"""The PENDING row is the outbox: a webhook delivery's or an invitation's job is keyed by its row.

Both kinds are queued the same way: a `webhook.deliver.v1` or `email.invitation.v1` job whose
envelope id is derived from (type, row id), so that enqueueing one twice is a no-op while it is
queued, waiting for a retry or running. That is what makes repair on read safe: a PENDING row
that has not moved for a while is enqueued again (or, still waiting for its tenant's cap, makes
its tenant dispatch), and only a row whose job was lost is sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from outlive.db.ports import Admission, JobProducer
from outlive.errors import QueueUnavailable

log = logging.getLogger(__name__)

# kind (as the dispatch function names it) -> (job type, the payload field carrying the row id)
JOBS = {
    "webhook": ("webhook.deliver.v1", "deliveryId"),
    "invitation": ("email.invitation.v1", "invitationId"),
}


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
    """The row's job, keyed by the row."""
    type, field = JOBS[kind]
    return jobs.build(type, {field: str(row_id)}, key=str(row_id))


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
    stale = [r for r in rows if r.status == "PENDING" and r.updated_at < cutoff]
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
    await requeue_stale("webhook", deliveries, jobs=jobs, admission=admission, grace_s=grace_s)
    return deliveries
