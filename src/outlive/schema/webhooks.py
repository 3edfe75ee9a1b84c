"""Webhook endpoints and their deliveries (contract §4 and §8)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry

from outlive.db.models import DeliveryStatus as DbDeliveryStatus
from outlive.services.webhooks import AttemptRecord, DeliveryRecord, EndpointRecord

DeliveryStatus = strawberry.enum(DbDeliveryStatus, name="DeliveryStatus")


@strawberry.type(description="One attempt of a webhook delivery, as its attempt log keeps it.")
class WebhookDeliveryAttempt:
    attempt: int = strawberry.field(description="Its number (the delivery's attempts after it).")
    response_status: int | None = strawberry.field(
        description="The HTTP status the endpoint answered; null when there was no answer."
    )
    body_excerpt: str | None = strawberry.field(
        description="The start of the response body: at most 1,024 bytes, decoded as UTF-8."
    )
    error: str | None = strawberry.field(
        description="What went wrong, in generic words (at most 500 characters); null on success."
    )
    started_at: datetime
    duration_ms: int = strawberry.field(description="From the host name lookup to the answer.")

    @classmethod
    def of(cls, a: AttemptRecord) -> WebhookDeliveryAttempt:
        return cls(
            attempt=a.attempt,
            response_status=a.response_status,
            body_excerpt=a.body_excerpt,
            error=a.error,
            started_at=a.started_at,
            duration_ms=a.duration_ms,
        )


@strawberry.type
class WebhookDelivery:
    id: strawberry.ID
    event_type: str
    status: DeliveryStatus  # type: ignore[valid-type]
    attempts: int
    response_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None
    run_id: strawberry.ID | None = strawberry.field(
        default=None, description="The run whose settling this delivery announces."
    )
    next_attempt_at: datetime | None = strawberry.field(
        default=None,
        description="PENDING after a failed attempt: when the next one is due (retryWebhookDelivery"
        " makes it now). Null when it is not waiting for a retry.",
    )

    @classmethod
    def of(cls, d: DeliveryRecord) -> WebhookDelivery:
        return cls(
            id=strawberry.ID(str(d.id)),
            event_type=d.event_type,
            status=d.status,
            attempts=d.attempts,
            response_status=d.response_status,
            last_error=d.last_error,
            created_at=d.created_at,
            delivered_at=d.delivered_at,
            run_id=strawberry.ID(str(d.run_id)) if d.run_id is not None else None,
            next_attempt_at=d.next_attempt_at,
        )

    @strawberry.field(  # type: ignore[untyped-decorator]
        description="Its attempts, newest first: the newest 20 are kept, each with at most 1,024"
        " bytes of the response body."
    )
    async def attempt_log(self, info: strawberry.Info[Any, Any]) -> list[WebhookDeliveryAttempt]:
        found = await info.context.delivery_attempts(str(self.id))
        return [WebhookDeliveryAttempt.of(a) for a in cast(list[AttemptRecord], found)]


@strawberry.type
class WebhookEndpoint:
    id: strawberry.ID
    url: str
    events: list[str]
    created_at: datetime
    record: strawberry.Private[EndpointRecord]

    @strawberry.field(  # type: ignore[untyped-decorator]
        description="Newest first. `status`: only those (null: any); `before`: only those created"
        " before it (the createdAt of the last one shown, to page on)."
    )
    async def deliveries(
        self,
        info: strawberry.Info[Any, Any],
        first: int | None = 20,
        status: DeliveryStatus | None = None,  # type: ignore[valid-type]
        before: datetime | None = None,
    ) -> list[WebhookDelivery]:
        found = await info.context.endpoint_deliveries(
            self.record.id, first=20 if first is None else first, status=status, before=before
        )
        return [WebhookDelivery.of(d) for d in cast(list[DeliveryRecord], found)]

    @strawberry.field(  # type: ignore[untyped-decorator]
        description="How many deliveries it has (`status`: only those; null: any), counted up to"
        " 1,001: 1,001 means more than 1,000."
    )
    async def delivery_count(
        self,
        info: strawberry.Info[Any, Any],
        status: DeliveryStatus | None = None,  # type: ignore[valid-type]
    ) -> int:
        return cast(int, await info.context.endpoint_delivery_count(self.record.id, status))

    @classmethod
    def of(cls, e: EndpointRecord) -> WebhookEndpoint:
        return cls(
            id=strawberry.ID(str(e.id)),
            url=e.url,
            events=e.events,
            created_at=e.created_at,
            record=e,
        )


@strawberry.type
class RedeliverFailedWebhooksPayload:
    count: int = strawberry.field(description="How many FAILED deliveries were sent again.")


@strawberry.type
class RetryPendingWebhookDeliveriesPayload:
    count: int = strawberry.field(
        description="How many PENDING deliveries waiting for a retry are tried now."
    )


@strawberry.type
class CreateWebhookEndpointPayload:
    endpoint: WebhookEndpoint
    secret: str = strawberry.field(description="The whsec_ signing secret, shown this once.")
