"""Webhooks (Standard Webhooks, contract §8).

An endpoint has a URL, a `whsec_…` secret (shown once) and the event types it wants (empty: all).
When a run settles, the settling statement writes one `webhook_deliveries` row per subscribed
endpoint (`SETTLED_DELIVERIES_CTE`) and `announce_deliveries` queues one `webhook.deliver.v1` job
each, after the commit; the job signs and POSTs the stored body. The signature is
`v1,<base64 HMAC-SHA256>` over `id.timestamp.body`, keyed by the secret's base64 payload, as the
Standard Webhooks specification says (the tests verify it with the reference `standardwebhooks`
package).

URLs are checked twice against server-side request forgery (`services.destinations`): when the
endpoint is created and before every delivery (DNS can change), and the delivery connects to the
address that was checked.

A tenant has at most `OUTLIVE_WEBHOOK_MAX_ENDPOINTS`; the count is taken under a lock on the
tenant's row, so concurrent creates cannot pass it together.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from outlive.db.models import DeliveryStatus
from outlive.db.records import Record
from outlive.db.tx import Db, Unit, UnitOfWork
from outlive.errors import BadUserInput, NotFound
from outlive.ids import DeliveryId, EndpointId, TenantId
from outlive.services import outbox
from outlive.services.destinations import check_url_shape, resolve_public
from outlive.services.webhooks import queries
from outlive.services.webhooks.queries import SETTLED_DELIVERIES_CTE as SETTLED_DELIVERIES_CTE

log = logging.getLogger(__name__)

RUN_EVENTS = ("run.succeeded", "run.failed", "run.cancelled")
MAX_ENDPOINTS_PER_TENANT = 50  # the default of OUTLIVE_WEBHOOK_MAX_ENDPOINTS
MAX_DELIVERIES_PAGE = 100
MAX_DELIVERIES_COUNT = 1000  # an endpoint's deliveries are counted up to this, then "1,000+"


@dataclass(frozen=True, slots=True)
class EndpointRecord(Record):
    id: EndpointId
    url: str
    events: list[str]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class DeliveryRecord(Record):
    id: DeliveryId
    endpoint_id: EndpointId
    event_type: str
    status: DeliveryStatus
    attempts: int
    response_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    updated_at: datetime
    tenant_id: TenantId
    dispatched_at: datetime | None
    run_id: UUID | None = None
    next_attempt_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttemptRecord(Record):
    """One logged attempt of a delivery (`webhook_delivery_attempts`)."""

    delivery_id: DeliveryId
    attempt: int
    response_status: int | None
    body_excerpt: str | None
    error: str | None
    started_at: datetime
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A pending delivery, ready to send: where, what, and how to sign it."""

    id: DeliveryId
    tenant_id: TenantId
    url: str
    secret: str
    body: bytes


# --- signing ----------------------------------------------------------------------------------


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(outgoing: Outgoing, now: datetime | None = None) -> dict[str, str]:
    timestamp = int((now or datetime.now(UTC)).timestamp())
    msg_id = f"msg_{outgoing.id.hex}"
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(outgoing.secret, msg_id, timestamp, outgoing.body),
    }


# --- endpoints --------------------------------------------------------------------------------


def check_events(events: list[str] | None) -> list[str]:
    chosen = sorted(set(events or []))
    unknown = [e for e in chosen if e not in RUN_EVENTS]
    if unknown:
        raise BadUserInput(f"unknown event types {unknown}; known: {', '.join(RUN_EVENTS)}")
    return chosen


async def create_endpoint(
    uow: UnitOfWork,
    *,
    url: str,
    events: list[str] | None,
    allow_private: bool,
    max_endpoints: int = MAX_ENDPOINTS_PER_TENANT,
) -> tuple[EndpointRecord, str]:
    """The endpoint and its secret (returned once, never again)."""
    tenant_id = uow.require_tenant()
    url = check_url_shape(url)
    chosen = check_events(events)
    await resolve_public(url, allow_private=allow_private, tenant=tenant_id)
    # Creates of one tenant take turns from here to the commit: the count cannot go stale.
    await uow.execute(queries.LOCK_TENANT, tenant_id=tenant_id)
    count = await uow.one(queries.COUNT_ENDPOINTS, tenant_id=tenant_id)
    if count is not None and count["n"] >= max_endpoints:
        raise BadUserInput(f"a tenant has at most {max_endpoints} webhook endpoints")
    secret = new_secret()
    row = await uow.one(
        queries.INSERT_ENDPOINT, tenant_id=tenant_id, url=url, secret=secret, events=chosen
    )
    assert row is not None  # noqa: S101 (an INSERT … RETURNING returns its row)
    return EndpointRecord.from_row(row), secret


async def delete_endpoint(uow: UnitOfWork, endpoint_id: EndpointId) -> bool:
    deleted = await uow.execute(
        queries.DELETE_ENDPOINT, endpoint_id=endpoint_id, tenant_id=uow.require_tenant()
    )
    return deleted > 0


async def list_endpoints(db: Db, tenant_id: TenantId) -> list[EndpointRecord]:
    return [
        EndpointRecord.from_row(row) for row in await db.all(queries.ENDPOINTS, tenant_id=tenant_id)
    ]


async def get_endpoint(
    db: Db, tenant_id: TenantId, endpoint_id: EndpointId
) -> EndpointRecord | None:
    row = await db.one(queries.ENDPOINT, endpoint_id=endpoint_id, tenant_id=tenant_id)
    return EndpointRecord.from_row(row) if row is not None else None


async def get_delivery(
    db: Db, tenant_id: TenantId, delivery_id: DeliveryId
) -> DeliveryRecord | None:
    row = await db.one(queries.DELIVERY, delivery_id=delivery_id, tenant_id=tenant_id)
    return DeliveryRecord.from_row(row) if row is not None else None


def check_deliveries_page(first: int) -> None:
    if not 0 <= first <= MAX_DELIVERIES_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_DELIVERIES_PAGE}")


async def list_deliveries_of_endpoints(
    db: Db,
    tenant_id: TenantId,
    endpoint_ids: Sequence[EndpointId],
    *,
    first: int,
    status: DeliveryStatus | None = None,
    before: datetime | None = None,
) -> dict[EndpointId, list[DeliveryRecord]]:
    """Each endpoint's newest `first` deliveries (one statement for all of them), scoped to the
    tenant: another tenant's endpoint id has none. Only `status` ones (None: any), created
    before `before` (None: up to now; the `createdAt` of the last one shown, to page on)."""
    check_deliveries_page(first)
    rows = await db.all(
        queries.DELIVERIES_OF_ENDPOINTS,
        endpoint_ids=list(dict.fromkeys(endpoint_ids)),
        tenant_id=tenant_id,
        first=first,
        status=status.value if status is not None else None,
        before=before,
    )
    found: dict[EndpointId, list[DeliveryRecord]] = {e: [] for e in endpoint_ids}
    for row in rows:
        found[EndpointId(row["endpoint_id"])].append(DeliveryRecord.from_row(row))
    return found


async def count_deliveries_of_endpoints(
    db: Db,
    tenant_id: TenantId,
    endpoint_ids: Sequence[EndpointId],
    *,
    status: DeliveryStatus | None = None,
) -> dict[EndpointId, int]:
    """How many deliveries each endpoint has (only `status` ones; None: any), counted up to
    `MAX_DELIVERIES_COUNT + 1` (more reads as that: "1,000+"), in one statement, scoped to the
    tenant: another tenant's endpoint has none."""
    rows = await db.all(
        queries.COUNT_DELIVERIES_OF_ENDPOINTS,
        endpoint_ids=list(dict.fromkeys(endpoint_ids)),
        tenant_id=tenant_id,
        status=status.value if status is not None else None,
        cap=MAX_DELIVERIES_COUNT + 1,
    )
    return {EndpointId(row["endpoint_id"]): int(row["n"]) for row in rows}


# --- deliveries -------------------------------------------------------------------------------


def announce_deliveries(uow: Unit, tenant_id: TenantId, delivery_ids: Sequence[UUID]) -> int:
    """After a settle wrote `delivery_ids` (waiting for the tenant's jobs cap): the tenant's
    waiting deliveries are admitted after the commit, each a `webhook.deliver.v1` job keyed by
    the delivery. The PENDING row is the outbox: a row whose job was never sent (the queue down,
    the process killed after the commit) is admitted or enqueued again when it is read
    (`outbox.requeue_stale`)."""
    for delivery_id in delivery_ids:
        uow.nudge("webhook.delivery.updated", delivery_id, tenant_id=tenant_id)
    if delivery_ids:
        _dispatch_after_commit(uow, tenant_id)
    return len(delivery_ids)


def _dispatch_after_commit(uow: Unit, tenant_id: UUID) -> None:
    uow.admit_after_commit(tenant_id, "jobs", queue_down_raises=False)


async def pending_delivery(db: Db, delivery_id: DeliveryId) -> Outgoing | None:
    row = await db.one(queries.PENDING_DELIVERY, delivery_id=delivery_id)
    if row is None:
        return None
    body = json.dumps(row["body"], separators=(",", ":")).encode()
    return Outgoing(
        id=DeliveryId(row["id"]),
        tenant_id=TenantId(row["tenant_id"]),
        url=row["url"],
        secret=row["secret"],
        body=body,
    )


async def record_attempt(
    uow: UnitOfWork,
    delivery_id: DeliveryId,
    *,
    response_status: int | None,
    error: str | None,
    attempt: outbox.Attempt | None = None,
) -> None:
    """A try that did not succeed, logged (`attempt`); the row stays PENDING for the next one."""
    await outbox.record_attempt(
        uow,
        outbox.WEBHOOK,
        delivery_id,
        error=error,
        attempt=attempt,
        response_status=response_status,
    )


async def finish_delivery(
    uow: UnitOfWork,
    delivery_id: DeliveryId,
    *,
    status: DeliveryStatus,
    response_status: int | None = None,
    error: str | None = None,
    count_attempt: bool = False,
    attempt: outbox.Attempt | None = None,
) -> bool:
    """DELIVERED or FAILED, only from PENDING: a redelivered job finds nothing to do. Its slot is
    free for the tenant's next delivery (`outbox.finish`); a counted attempt is logged."""
    return await outbox.finish(
        uow,
        outbox.WEBHOOK,
        delivery_id,
        status=status.value,
        error=error,
        count_attempt=count_attempt,
        attempt=attempt,
        response_status=response_status,
    )


async def list_attempts_of_deliveries(
    db: Db, tenant_id: TenantId, delivery_ids: Sequence[DeliveryId]
) -> dict[DeliveryId, list[AttemptRecord]]:
    """Each delivery's logged attempts, newest first (at most `ATTEMPTS_KEPT` each, as kept),
    in one statement, scoped to the tenant: another tenant's delivery has none."""
    rows = await db.all(
        queries.ATTEMPTS_OF_DELIVERIES,
        delivery_ids=list(dict.fromkeys(delivery_ids)),
        tenant_id=tenant_id,
    )
    found: dict[DeliveryId, list[AttemptRecord]] = {d: [] for d in delivery_ids}
    for row in rows:
        found[DeliveryId(row["delivery_id"])].append(AttemptRecord.from_row(row))
    return found


async def schedule_next_attempt(uow: UnitOfWork, delivery_id: DeliveryId, delay_s: float) -> None:
    """A failed attempt's retry is due in `delay_s` (the consumer's backoff), as the console
    shows it (`nextAttemptAt`)."""
    row = await uow.one(queries.SCHEDULE_NEXT_ATTEMPT, delivery_id=delivery_id, delay=delay_s)
    if row is not None:
        uow.nudge("webhook.delivery.updated", delivery_id, tenant_id=row["tenant_id"])


# --- redelivery (redeliverWebhook) -------------------------------------------------------------


async def delivery_endpoint(db: Db, tenant_id: TenantId, delivery_id: DeliveryId) -> EndpointId:
    """The endpoint of the tenant's delivery (redeliveries are rate-limited per endpoint)."""
    found = await db.one(queries.DELIVERY_ENDPOINT, tenant_id=tenant_id, delivery_id=delivery_id)
    if found is None:
        raise NotFound(f"webhook delivery {delivery_id} not found")
    return EndpointId(found["endpoint_id"])


async def redeliver(uow: UnitOfWork, delivery_id: DeliveryId) -> DeliveryRecord:
    """Send a delivered or failed delivery again: the same row (so the same `webhook-id`, which
    receivers dedupe on), back to PENDING, and a new `webhook.deliver.v1` job after the commit.
    Its history stays: `attempts` keeps counting, `lastError` is replaced by the next try's. A
    PENDING delivery is already on its way and comes back unchanged, with no second job."""
    tenant_id = uow.require_tenant()
    moved = await uow.one(queries.REDELIVER, delivery_id=delivery_id, tenant_id=tenant_id)
    if moved is not None:
        announce_deliveries(uow, TenantId(tenant_id), [moved["id"]])
        return DeliveryRecord.from_row(moved)
    found = await uow.one(queries.DELIVERY, delivery_id=delivery_id, tenant_id=tenant_id)
    if found is None:
        raise NotFound(f"webhook delivery {delivery_id} not found")
    return DeliveryRecord.from_row(found)


async def retry_now(uow: UnitOfWork, delivery_id: DeliveryId) -> tuple[DeliveryRecord, bool]:
    """A PENDING delivery waiting for the backoff of a failed attempt, due now: the row says so
    (`nextAttemptAt` now) and the caller brings its job forward after the commit. Any other
    delivery (never tried yet, waiting for the tenant's cap, delivered, failed) comes back
    unchanged, with False."""
    tenant_id = uow.require_tenant()
    moved = await uow.one(queries.RETRY_NOW, delivery_id=delivery_id, tenant_id=tenant_id)
    if moved is not None:
        uow.nudge("webhook.delivery.updated", delivery_id, tenant_id=tenant_id)
        return DeliveryRecord.from_row(moved), True
    found = await uow.one(queries.DELIVERY, delivery_id=delivery_id, tenant_id=tenant_id)
    if found is None:
        raise NotFound(f"webhook delivery {delivery_id} not found")
    return DeliveryRecord.from_row(found), False


async def _own_endpoint(uow: UnitOfWork, endpoint_id: EndpointId) -> TenantId:
    """The unit's tenant, once `endpoint_id` is known to be one of its endpoints (NotFound as
    for a random id otherwise)."""
    tenant_id = TenantId(uow.require_tenant())
    mine = await uow.one(queries.ENDPOINT_OF_TENANT, endpoint_id=endpoint_id, tenant_id=tenant_id)
    if mine is None:
        raise NotFound(f"webhook endpoint {endpoint_id} not found")
    return tenant_id


async def retry_pending(
    uow: UnitOfWork, endpoint_id: EndpointId, *, limit: int
) -> list[DeliveryId]:
    """The endpoint's PENDING deliveries waiting for the retry of a failed attempt (the newest
    `limit`), each due now as `retry_now` makes one: the caller brings their jobs forward after
    the commit. The ones moved."""
    tenant_id = await _own_endpoint(uow, endpoint_id)
    rows = await uow.all(
        queries.RETRY_PENDING, endpoint_id=endpoint_id, tenant_id=tenant_id, limit=limit
    )
    moved = [DeliveryId(r["id"]) for r in rows]
    for delivery_id in moved:
        uow.nudge("webhook.delivery.updated", delivery_id, tenant_id=tenant_id)
    return moved


async def redeliver_failed(uow: UnitOfWork, endpoint_id: EndpointId, *, limit: int) -> int:
    """The endpoint's FAILED deliveries (the newest `limit`) sent again, each as `redeliver`
    does: back to PENDING, admitted under the tenant's jobs cap after the commit. How many."""
    tenant_id = await _own_endpoint(uow, endpoint_id)
    rows = await uow.all(
        queries.REDELIVER_FAILED, endpoint_id=endpoint_id, tenant_id=tenant_id, limit=limit
    )
    announce_deliveries(uow, tenant_id, [r["id"] for r in rows])
    return len(rows)


async def send_test(uow: UnitOfWork, endpoint_id: EndpointId) -> DeliveryRecord:
    """A `webhook.test` delivery to the endpoint (its `data`: `{"endpointId": …}`), signed and
    sent like any other after the commit, so its owner can see the endpoint answer."""
    tenant_id = TenantId(uow.require_tenant())
    row = await uow.one(queries.INSERT_TEST_DELIVERY, endpoint_id=endpoint_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound(f"webhook endpoint {endpoint_id} not found")
    announce_deliveries(uow, tenant_id, [row["id"]])
    return DeliveryRecord.from_row(row)
