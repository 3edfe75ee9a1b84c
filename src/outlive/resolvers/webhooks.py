"""`webhookEndpoints`, `createWebhookEndpoint`, `deleteWebhookEndpoint`, and the deliveries'
`redeliverWebhook`, `retryWebhookDelivery`, `redeliverFailedWebhooks`,
`retryPendingWebhookDeliveries`."""

from __future__ import annotations

import asyncio

import strawberry

from outlive.errors import NotFound
from outlive.ids import DeliveryId, EndpointId
from outlive.resolvers.context import Context
from outlive.schema.webhooks import (
    CreateWebhookEndpointPayload,
    RedeliverFailedWebhooksPayload,
    RetryPendingWebhookDeliveriesPayload,
    WebhookDelivery,
    WebhookEndpoint,
)
from outlive.services import outbox, webhooks
from outlive.services.ids import parse_uuid
from outlive.services.ratelimits import Bucket

Info = strawberry.Info[Context, None]


async def webhook_endpoints(info: Info) -> list[WebhookEndpoint]:
    ctx = info.context
    found = await webhooks.list_endpoints(ctx.services.sessions, ctx.tenant_id)
    return [WebhookEndpoint.of(e) for e in found]


async def webhook_endpoint(info: Info, id: strawberry.ID) -> WebhookEndpoint | None:
    ctx = info.context
    endpoint_id = EndpointId(parse_uuid(id, what="webhook endpoint"))
    found = await webhooks.get_endpoint(ctx.services.sessions, ctx.tenant_id, endpoint_id)
    return WebhookEndpoint.of(found) if found is not None else None


async def webhook_delivery(info: Info, id: strawberry.ID) -> WebhookDelivery | None:
    ctx = info.context
    delivery_id = DeliveryId(parse_uuid(id, what="webhook delivery"))
    found = await webhooks.get_delivery(ctx.services.sessions, ctx.tenant_id, delivery_id)
    return WebhookDelivery.of(found) if found is not None else None


async def create_webhook_endpoint(
    info: Info, url: str, events: list[str] | None = None
) -> CreateWebhookEndpointPayload:
    ctx = info.context
    await ctx.services.limiter.take(
        Bucket("create-webhook", str(ctx.tenant_id), ctx.services.settings.rate_create_webhook),
        message="too many webhook endpoints created: try again later",
    )
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        endpoint, secret = await webhooks.create_endpoint(
            uow,
            url=url,
            events=events,
            allow_private=ctx.services.settings.webhook_allow_private,
            max_endpoints=ctx.services.settings.webhook_max_endpoints,
        )
    return CreateWebhookEndpointPayload(endpoint=WebhookEndpoint.of(endpoint), secret=secret)


async def delete_webhook_endpoint(info: Info, id: strawberry.ID) -> bool:
    ctx = info.context
    endpoint_id = EndpointId(parse_uuid(id, what="webhook endpoint"))
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await webhooks.delete_endpoint(uow, endpoint_id)


async def _own_endpoint(info: Info, endpoint_id: strawberry.ID) -> EndpointId:
    """The caller's endpoint, or NOT_FOUND: looked up before any bucket is taken, so another
    tenant's id can neither drain nor probe an endpoint's redelivery bucket."""
    ctx = info.context
    parsed = EndpointId(parse_uuid(endpoint_id, what="webhook endpoint"))
    if await webhooks.get_endpoint(ctx.services.sessions, ctx.tenant_id, parsed) is None:
        raise NotFound(f"webhook endpoint {parsed} not found")
    return parsed


async def _take_redelivery(info: Info, endpoint: EndpointId) -> None:
    """The tenant's bucket and the endpoint's; `endpoint` is the caller's (checked first)."""
    ctx = info.context
    s = ctx.services
    await s.limiter.take(
        Bucket("redeliver", str(ctx.tenant_id), s.settings.rate_redeliver_webhook),
        Bucket(
            "redeliver-to",
            str(endpoint),
            s.settings.rate_redeliver_webhook_endpoint,
            owner=str(ctx.tenant_id),
        ),
        message="too many redeliveries: try again later",
    )


async def redeliver_webhook(info: Info, delivery_id: strawberry.ID) -> WebhookDelivery:
    ctx = info.context
    parsed = DeliveryId(parse_uuid(delivery_id, what="webhook delivery"))
    endpoint = await webhooks.delivery_endpoint(ctx.services.sessions, ctx.tenant_id, parsed)
    await _take_redelivery(info, endpoint)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        delivery = await webhooks.redeliver(uow, parsed)
    return WebhookDelivery.of(delivery)


async def retry_webhook_delivery(info: Info, delivery_id: strawberry.ID) -> WebhookDelivery:
    ctx = info.context
    parsed = DeliveryId(parse_uuid(delivery_id, what="webhook delivery"))
    sessions = ctx.services.sessions
    endpoint = await webhooks.delivery_endpoint(sessions, ctx.tenant_id, parsed)
    await _take_redelivery(info, endpoint)
    async with sessions.unit(ctx.tenant_id) as uow:
        delivery, due_now = await webhooks.retry_now(uow, parsed)
    if due_now and sessions.jobs is not None:  # committed: its job is due now
        await sessions.jobs.bring_forward(outbox.job(sessions.jobs, "webhook", parsed))
    return WebhookDelivery.of(delivery)


async def retry_pending_webhook_deliveries(
    info: Info, endpoint_id: strawberry.ID
) -> RetryPendingWebhookDeliveriesPayload:
    ctx = info.context
    sessions = ctx.services.sessions
    parsed = await _own_endpoint(info, endpoint_id)
    await _take_redelivery(info, parsed)
    async with sessions.unit(ctx.tenant_id) as uow:
        moved = await webhooks.retry_pending(uow, parsed, limit=webhooks.MAX_DELIVERIES_PAGE)
    if moved and sessions.jobs is not None:  # committed: their jobs are due now
        jobs = sessions.jobs
        await asyncio.gather(*(jobs.bring_forward(outbox.job(jobs, "webhook", d)) for d in moved))
    return RetryPendingWebhookDeliveriesPayload(count=len(moved))


async def redeliver_failed_webhooks(
    info: Info, endpoint_id: strawberry.ID
) -> RedeliverFailedWebhooksPayload:
    ctx = info.context
    parsed = await _own_endpoint(info, endpoint_id)
    await _take_redelivery(info, parsed)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        count = await webhooks.redeliver_failed(uow, parsed, limit=webhooks.MAX_DELIVERIES_PAGE)
    return RedeliverFailedWebhooksPayload(count=count)


async def send_test_webhook(info: Info, endpoint_id: strawberry.ID) -> WebhookDelivery:
    ctx = info.context
    parsed = await _own_endpoint(info, endpoint_id)
    await _take_redelivery(info, parsed)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        delivery = await webhooks.send_test(uow, parsed)
    return WebhookDelivery.of(delivery)
