"""`redeliverWebhook` is rate-limited per tenant and per webhook endpoint (issue 19, item 3: 960
calls on 5 deliveries sent 471 POSTs in 10 s). Past either rate it answers RATE_LIMITED and the
delivery is left as it was."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import select

from outlive.db.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.support import Api, Servers, TenantHandle

REDELIVER = "mutation($id: ID!) { redeliverWebhook(deliveryId: $id) { id status } }"


async def _failed_deliveries(sessions: Sessions, tenant_id: UUID, count: int) -> list[str]:
    """One endpoint of the tenant's and `count` FAILED deliveries to it."""
    async with sessions.unit() as uow:
        endpoint = WebhookEndpoint(tenant_id=tenant_id, url="http://127.0.0.1:9/h", secret="s")
        uow.session.add(endpoint)
        await uow.session.flush()
        rows = [
            WebhookDelivery(
                endpoint_id=endpoint.id,
                tenant_id=tenant_id,
                event_type="run.cancelled",
                body={},
                status=DeliveryStatus.FAILED.value,
            )
            for _ in range(count)
        ]
        uow.session.add_all(rows)
        await uow.session.flush()
        return [str(r.id) for r in rows]


async def _status(sessions: Sessions, delivery_id: str) -> str:
    async with sessions.unit() as uow:
        found = await uow.session.scalar(
            select(WebhookDelivery.status).where(WebhookDelivery.id == UUID(delivery_id))
        )
    return str(found)


def _code(response: Any) -> str | None:
    errors = response.json().get("errors")
    return str(errors[0]["extensions"]["code"]) if errors else None


async def test_redeliveries_are_limited_per_endpoint_and_per_tenant(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    settings = make_settings(
        servers, rate_redeliver_webhook="4/3600", rate_redeliver_webhook_endpoint="2/3600"
    )
    a1, a2, a3 = await _failed_deliveries(sessions, tenant.id, 3)
    (b1,) = await _failed_deliveries(sessions, tenant.id, 1)
    (d1,) = await _failed_deliveries(sessions, tenant.id, 1)
    (e1,) = await _failed_deliveries(sessions, tenant.id, 1)
    (theirs,) = await _failed_deliveries(sessions, other_tenant.id, 1)

    async def redeliver(delivery_id: str, token: str = tenant.token) -> str | None:
        return _code(await api.post(REDELIVER, {"id": delivery_id}, token=token))

    async with Api.running(settings) as api:
        assert await redeliver(a1) is None
        assert await redeliver(a2) is None
        assert await redeliver(a3) == "RATE_LIMITED"  # endpoint A's two are spent
        assert await _status(sessions, a3) == "FAILED"  # nothing changed
        assert await redeliver(b1) is None
        assert await redeliver(d1) is None
        assert await redeliver(e1) == "RATE_LIMITED"  # the tenant's four are spent
        assert await _status(sessions, e1) == "FAILED"
        assert await redeliver(theirs, other_tenant.token) is None  # buckets of its own
        assert await redeliver(theirs) == "NOT_FOUND"  # and another tenant's id stays unknown


TEST = "mutation($id: ID!) { sendTestWebhook(endpointId: $id) { id } }"
FAILED_AGAIN = "mutation($id: ID!) { redeliverFailedWebhooks(endpointId: $id) { count } }"


async def test_another_tenant_cannot_drain_or_probe_an_endpoint_s_bucket(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    """Issue 39, L1: the endpoint is looked up under the caller's tenant before any bucket."""
    settings = make_settings(
        servers, rate_redeliver_webhook="100/3600", rate_redeliver_webhook_endpoint="2/3600"
    )
    (delivery,) = await _failed_deliveries(sessions, tenant.id, 1)
    async with sessions.unit() as uow:
        found = await uow.session.scalar(
            select(WebhookDelivery.endpoint_id).where(WebhookDelivery.id == UUID(delivery))
        )
    endpoint = str(found)
    async with Api.running(settings) as api:
        for query in (TEST, FAILED_AGAIN) * 5:  # ten tries on A's endpoint, by B
            answer = await api.post(query, {"id": endpoint}, token=other_tenant.token)
            assert _code(answer) == "NOT_FOUND"  # never RATE_LIMITED: B cannot tell
        assert _code(await api.post(TEST, {"id": endpoint}, token=tenant.token)) is None
        assert _code(await api.post(FAILED_AGAIN, {"id": endpoint}, token=tenant.token)) is None
        limited = await api.post(TEST, {"id": endpoint}, token=tenant.token)
        assert _code(limited) == "RATE_LIMITED"  # A's own two, and only A's, spent it
