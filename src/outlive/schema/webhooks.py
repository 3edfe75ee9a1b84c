"""Webhook endpoints and their deliveries (contract §4 and §8)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry

from outlive.db.models import DeliveryStatus as DbDeliveryStatus
from outlive.services.webhooks import DeliveryRecord, EndpointRecord

DeliveryStatus = strawberry.enum(DbDeliveryStatus, name="DeliveryStatus")


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
        )


@strawberry.type
class WebhookEndpoint:
    id: strawberry.ID
    url: str
    events: list[str]
    created_at: datetime
    record: strawberry.Private[EndpointRecord]

    @strawberry.field(description="Newest first.")  # type: ignore[untyped-decorator]
    async def deliveries(
        self, info: strawberry.Info[Any, Any], first: int | None = 20
    ) -> list[WebhookDelivery]:
        found = await info.context.endpoint_deliveries(
            self.record.id, first=20 if first is None else first
        )
        return [WebhookDelivery.of(d) for d in cast(list[DeliveryRecord], found)]

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
class CreateWebhookEndpointPayload:
    endpoint: WebhookEndpoint
    secret: str = strawberry.field(description="The whsec_ signing secret, shown this once.")
