"""`webhook.deliver.v1`: sign and POST a delivery's body; 2xx → DELIVERED, else retry."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from outlive.db.models import DeliveryStatus
from outlive.ids import DeliveryId
from outlive.jobs.envelopes import DeliverWebhookV1
from outlive.services import webhooks

if TYPE_CHECKING:
    from outlive.jobs.consumer import JobDeps

TIMEOUT_S = 10.0


class DeliveryFailed(Exception):
    """The endpoint did not answer 2xx; the consumer schedules the next attempt."""


async def handle(deps: JobDeps, payload: DeliverWebhookV1) -> None:
    delivery_id = DeliveryId(payload.delivery_id)
    async with deps.sessions.read() as session:
        outgoing = await webhooks.pending_delivery(session, delivery_id)
    if outgoing is None:
        return  # already delivered, given up, or its endpoint was deleted
    try:
        host, address = await webhooks.resolve_public(
            outgoing.url, allow_private=deps.settings.webhook_allow_private
        )
    except webhooks.UnsafeDestination as exc:  # permanent: recorded, not retried
        async with deps.sessions.unit() as uow:
            await webhooks.finish_delivery(
                uow,
                delivery_id,
                status=DeliveryStatus.FAILED,
                error=exc.message,
                count_attempt=True,
            )
        return
    headers = webhooks.signed_headers(outgoing)
    headers["host"] = httpx.URL(outgoing.url).netloc.decode("ascii")  # the name, not the address
    try:
        response = await deps.http.post(
            webhooks.pinned_url(outgoing.url, address),
            content=outgoing.body,
            headers=headers,
            timeout=TIMEOUT_S,
            extensions={"sni_hostname": host},
        )
    except httpx.HTTPError as exc:
        await _record(deps, delivery_id, None, f"{type(exc).__name__}: {exc}")
        raise DeliveryFailed(str(exc)) from exc
    if not response.is_success:
        error = f"answered {response.status_code}"
        await _record(deps, delivery_id, response.status_code, error)
        raise DeliveryFailed(error)
    async with deps.sessions.unit() as uow:
        await webhooks.finish_delivery(
            uow,
            delivery_id,
            status=DeliveryStatus.DELIVERED,
            response_status=response.status_code,
            count_attempt=True,
        )


async def _record(deps: JobDeps, delivery_id: DeliveryId, status: int | None, error: str) -> None:
    async with deps.sessions.unit() as uow:
        await webhooks.record_attempt(uow, delivery_id, response_status=status, error=error)


async def give_up(deps: JobDeps, payload: DeliverWebhookV1, error: str) -> None:
    async with deps.sessions.unit() as uow:
        await webhooks.finish_delivery(
            uow, DeliveryId(payload.delivery_id), status=DeliveryStatus.FAILED, error=error
        )
