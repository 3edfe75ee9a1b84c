"""A delivery's attempt log (`WebhookDelivery.attemptLog`): each attempt's status, the start of
the body (at most 1 KiB), its error, when and how long; newest first, the newest 20 kept, and
another tenant's deliveries have none."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.db.models.webhooks import ATTEMPT_EXCERPT_BYTES, ATTEMPTS_KEPT
from outlive.db.tx import Sessions
from outlive.ids import DeliveryId, EndpointId
from outlive.services import outbox, webhooks
from tests.jobs.test_webhooks import CREATE, _settle_a_run, receiver
from tests.support import Api, NudgeWatch, TenantHandle, loopback_server

__all__ = ["receiver"]  # the fixture, shared with the webhook tests

pytestmark = pytest.mark.timeout(120)

IDS = "{ webhookEndpoints { deliveries { id } } }"
LOG = """query($id: ID!) { webhookDelivery(id: $id) { id status attempts attemptLog {
  attempt responseStatus bodyExcerpt error startedAt durationMs } } }"""


async def _delivery(api: Api, token: str) -> dict[str, Any]:
    """The tenant's one delivery, with its attempt log."""
    data = await api.gql(IDS, token=token)
    (found,) = [d["id"] for e in data["webhookEndpoints"] for d in e["deliveries"]]
    delivery: dict[str, Any] = (await api.gql(LOG, {"id": found}, token=token))["webhookDelivery"]
    return delivery


async def test_each_attempt_is_logged_with_its_status_excerpt_and_error(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    # 6,000 bytes: the excerpt keeps 1,024; then a NUL and a byte that is not UTF-8
    answers: list[tuple[int, str | bytes]] = [(500, "é" * 3000), (200, b"ok\x00\xff")]

    async def hook(request: Request) -> Response:
        await request.body()
        status, body = answers.pop(0) if answers else (200, "")
        return Response(body, status_code=status)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with loopback_server(app) as base, jobs_world(job_retry_base_s=0.1) as world:
        await api.gql(
            CREATE, {"url": f"{base}/hook", "events": ["run.cancelled"]}, token=tenant.token
        )
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            before = datetime.now(UTC)
            await _settle_a_run(api, watch, tenant.token)

            async def delivered() -> dict[str, Any] | None:
                d = await _delivery(api, tenant.token)
                return d if d["status"] == "DELIVERED" else None

            delivery = await watch.until_true(delivered, 30, "delivered after one failure")
    second, first = delivery["attemptLog"]  # newest first
    assert (second["attempt"], second["responseStatus"], second["bodyExcerpt"]) == (
        2,
        200,
        "ok\ufffd\ufffd",  # what text cannot hold is replaced, not a failed attempt record
    )
    assert second["error"] is None
    assert (first["attempt"], first["responseStatus"], first["error"]) == (1, 500, "answered 500")
    assert first["bodyExcerpt"] == "é" * (ATTEMPT_EXCERPT_BYTES // 2)  # 2 bytes each, cut at 1 KiB
    for attempt in (first, second):
        assert datetime.fromisoformat(attempt["startedAt"]) >= before
        assert 0 <= attempt["durationMs"] < 30_000
    assert first["startedAt"] < second["startedAt"]


async def test_a_delivery_keeps_its_newest_attempts_and_only_its_tenant_reads_them(
    api: Api, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle, receiver: Any
) -> None:
    _, url = receiver
    await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
    run = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
    await api.cancel(tenant.token, run)  # QUEUED: cancelled at once; no worker sends it
    delivery = await _delivery(api, tenant.token)
    assert delivery["attemptLog"] == []
    delivery_id = DeliveryId(UUID(delivery["id"]))
    tries = ATTEMPTS_KEPT + 3
    for n in range(tries):
        async with sessions.unit() as uow:
            note = outbox.Attempt(datetime.now(UTC), n, 503, f"try {n + 1}")
            await webhooks.record_attempt(
                uow, delivery_id, response_status=503, error="x" * 800, attempt=note
            )
    delivery = await _delivery(api, tenant.token)
    assert delivery["attempts"] == tries
    log = delivery["attemptLog"]
    assert [a["attempt"] for a in log] == list(range(tries, tries - ATTEMPTS_KEPT, -1))
    assert log[0]["bodyExcerpt"] == f"try {tries}"
    assert len(log[0]["error"]) == 500  # the error is bounded too
    theirs_read = await api.gql(LOG, {"id": delivery["id"]}, token=other_tenant.token)
    assert theirs_read["webhookDelivery"] is None
    theirs = await webhooks.list_attempts_of_deliveries(sessions, other_tenant.id, [delivery_id])
    assert theirs == {delivery_id: []}
    mine = await webhooks.list_attempts_of_deliveries(sessions, tenant.id, [delivery_id])
    assert len(mine[delivery_id]) == ATTEMPTS_KEPT


COUNTS = """query($status: DeliveryStatus) { webhookEndpoints { url
  all: deliveryCount failed: deliveryCount(status: FAILED)
  pending: deliveryCount(status: $status) } }"""


async def test_an_endpoints_deliveries_are_counted_bounded_and_for_its_tenant(
    api: Api, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle, receiver: Any
) -> None:
    _, url = receiver
    for events in (["run.cancelled"], ["run.failed"]):  # the second endpoint gets none
        await api.gql(CREATE, {"url": url, "events": events}, token=tenant.token)
    endpoints = (await api.gql(IDS.replace("deliveries { id }", "id"), token=tenant.token))[
        "webhookEndpoints"
    ]
    busy = [e["id"] for e in endpoints]
    async with sessions.unit() as uow:  # deliveries by hand: the senders are not under test
        await uow.session.execute(
            text(
                "INSERT INTO webhook_deliveries (endpoint_id, tenant_id, event_type, body, status)"
                " SELECT e.id, e.tenant_id, 'run.cancelled', '{}'::jsonb,"
                " CASE WHEN g <= 3 THEN 'FAILED' ELSE 'PENDING' END"
                " FROM webhook_endpoints e, generate_series(1, 1005) g"
                " WHERE e.tenant_id = :t AND 'run.cancelled' = ANY(e.events)"
            ),
            {"t": tenant.id},
        )
    data = await api.gql(COUNTS, {"status": "PENDING"}, token=tenant.token)
    counts = sorted((e["all"], e["failed"], e["pending"]) for e in data["webhookEndpoints"])
    assert counts == [(0, 0, 0), (1001, 3, 1001)]  # past 1,000: counted no further
    theirs = await webhooks.count_deliveries_of_endpoints(
        sessions, other_tenant.id, [EndpointId(UUID(e)) for e in busy]
    )
    assert set(theirs.values()) == {0}
