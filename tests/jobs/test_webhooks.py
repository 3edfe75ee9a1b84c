"""Webhook deliveries (Standard Webhooks): signed, retried until 2xx, finally FAILED; SSRF-safe."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, loopback_server

ENDPOINTS = """{ webhookEndpoints { id url events deliveries { id eventType status attempts
  responseStatus lastError deliveredAt } } }"""
CREATE = """mutation($url: String!, $events: [String!]) {
  createWebhookEndpoint(url: $url, events: $events) { secret endpoint { id url events } } }"""


@dataclass
class Receiver:
    """A webhook endpoint on loopback that answers the scripted statuses, then 200."""

    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def hook(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        self.arrived.set()
        return Response(status_code=self.statuses.pop(0) if self.statuses else 200)


@pytest.fixture
async def receiver() -> Any:
    r = Receiver()
    async with loopback_server(Starlette(routes=[Route("/hook", r.hook, methods=["POST"])])) as u:
        yield r, f"{u}/hook"


async def _settle_a_run(api: Api, watch: NudgeWatch, token: str) -> str:
    """Cancel a long run: at once if still QUEUED, else at its next cancel check (a worker runs)."""
    started = await api.start_run(token, "demo", {"turns": 1000, "delayMs": 600_000})
    run_id = str(started["run"]["id"])
    await api.cancel(token, run_id)

    async def cancelled() -> dict[str, Any] | None:
        run = await api.run(token, run_id)
        return run if run is not None and run["status"] == "CANCELLED" else None

    await watch.until_true(cancelled, 30, "the run cancelled")
    return run_id


async def _wait_delivery(api: Api, watch: NudgeWatch, token: str, status: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        data = await api.gql(ENDPOINTS, token=token)
        deliveries = [d for e in data["webhookEndpoints"] for d in e["deliveries"]]
        done = [d for d in deliveries if d["status"] == status]
        return done[0] if done else None

    return await watch.until_true(check, 30, f"a {status} delivery")


async def test_a_delivery_is_signed_and_retried_until_the_endpoint_answers_2xx(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, receiver: Any
) -> None:
    r, url = receiver
    r.statuses = [500]
    async with jobs_world(job_retry_base_s=0.1, job_max_attempts=4) as world:
        created = await api.gql(
            CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token
        )
        secret = created["createWebhookEndpoint"]["secret"]
        assert secret.startswith("whsec_")
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            run_id = await _settle_a_run(api, watch, tenant.token)
            delivery = await _wait_delivery(api, watch, tenant.token, "DELIVERED")
            await watch.saw("webhook.delivery.updated")
    assert delivery["attempts"] == 2
    assert delivery["responseStatus"] == 200
    assert delivery["deliveredAt"]
    assert delivery["lastError"] is None  # delivered: the first try's 500 is in its log only
    assert delivery["eventType"] == "run.cancelled"
    assert len(r.received) == 2
    headers, body = r.received[-1]
    payload = Webhook(secret).verify(body, headers)  # raises on a bad signature
    assert payload["type"] == "run.cancelled"
    assert payload["data"] == {"runId": run_id, "agent": "demo", "status": "CANCELLED"}
    assert datetime.fromisoformat(payload["timestamp"]).utcoffset() == timedelta(0)
    assert headers["webhook-id"] == r.received[0][0]["webhook-id"]  # same message, retried


async def test_an_endpoint_that_keeps_failing_ends_failed_with_the_last_error(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, receiver: Any
) -> None:
    r, url = receiver
    r.statuses = [500] * 10
    async with jobs_world(job_retry_base_s=0.05, job_max_attempts=3) as world:
        await api.gql(CREATE, {"url": url}, token=tenant.token)
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            await _settle_a_run(api, watch, tenant.token)
            delivery = await _wait_delivery(api, watch, tenant.token, "FAILED")
    assert delivery["attempts"] == 3
    assert delivery["responseStatus"] == 500
    assert "answered 500" in delivery["lastError"]
    assert len(r.received) == 3


async def test_an_endpoint_gets_only_the_events_it_subscribed_to(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, receiver: Any
) -> None:
    r, url = receiver
    async with (
        jobs_world() as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        await api.gql(CREATE, {"url": url, "events": ["run.succeeded"]}, token=tenant.token)
        await api.gql(CREATE, {"url": url + "?all=1", "events": []}, token=tenant.token)
        await _settle_a_run(api, watch, tenant.token)
        await asyncio.wait_for(r.arrived.wait(), 30)
    data = await api.gql(ENDPOINTS, token=tenant.token)
    counts = {e["url"]: len(e["deliveries"]) for e in data["webhookEndpoints"]}
    assert counts == {url: 0, url + "?all=1": 1}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/x", "must be http or https"),
        ("javascript:alert(1)", "must be http or https"),
        ("http://127.0.0.1:8000/hook", "destination not allowed"),
        ("http://localhost/hook", "destination not allowed"),
        ("http://10.1.2.3/hook", "destination not allowed"),
        ("http://169.254.169.254/latest/meta-data", "destination not allowed"),
        ("http://[::1]/hook", "destination not allowed"),
        # IPv6 forms that carry an IPv4 loopback address (issue 10, item 7)
        ("http://[::127.0.0.1]/hook", "destination not allowed"),
        ("http://[::ffff:127.0.0.1]/hook", "destination not allowed"),
        ("http://[64:ff9b::7f00:1]/hook", "destination not allowed"),
        ("http://[64:ff9b:1::7f00:1]/hook", "destination not allowed"),
        ("http://[2002:7f00:1::]/hook", "destination not allowed"),
        ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "destination not allowed"),
        # a name that does not resolve reads exactly like a private one: no DNS mapping
        ("http://no-such-host.invalid/hook", "destination not allowed"),
        ("http://user:pw@example.com/hook", "must not carry credentials"),
    ],
)
async def test_unsafe_webhook_urls_are_refused(
    servers: Servers, tenant: TenantHandle, url: str, message: str
) -> None:
    async with Api.running(make_settings(servers, webhook_allow_private=False)) as api:
        response = await api.post(CREATE, {"url": url}, token=tenant.token)
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert message in error["message"]
        if message == "destination not allowed":  # never the name's address, nor why
            assert error["message"] == message
        assert (await api.gql(ENDPOINTS, token=tenant.token))["webhookEndpoints"] == []


async def test_a_destination_that_turned_private_is_not_called(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, receiver: Any
) -> None:
    """Created while private addresses were allowed; delivered by a worker that refuses them
    (as after a DNS change): the delivery fails at once, without a request or a retry."""
    r, url = receiver
    await api.gql(CREATE, {"url": url}, token=tenant.token)
    async with (
        jobs_world(webhook_allow_private=False) as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        await _settle_a_run(api, watch, tenant.token)
        delivery = await _wait_delivery(api, watch, tenant.token, "FAILED")
    assert delivery["attempts"] == 1
    assert delivery["lastError"] == "destination not allowed"
    assert r.received == []


async def test_deleting_an_endpoint_is_scoped_to_the_tenant(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, settings: Settings
) -> None:
    created = await api.gql(CREATE, {"url": "http://127.0.0.1:9/x"}, token=tenant.token)
    endpoint_id = created["createWebhookEndpoint"]["endpoint"]["id"]
    delete = "mutation($id: ID!) { deleteWebhookEndpoint(id: $id) }"
    assert (await api.gql(delete, {"id": endpoint_id}, token=other_tenant.token)) == {
        "deleteWebhookEndpoint": False
    }
    assert (await api.gql(ENDPOINTS, token=other_tenant.token))["webhookEndpoints"] == []
    assert len((await api.gql(ENDPOINTS, token=tenant.token))["webhookEndpoints"]) == 1
    assert (await api.gql(delete, {"id": endpoint_id}, token=tenant.token)) == {
        "deleteWebhookEndpoint": True
    }
    assert (await api.gql(ENDPOINTS, token=tenant.token))["webhookEndpoints"] == []
    bad = await api.post(
        CREATE, {"url": "http://127.0.0.1:9/x", "events": ["run.exploded"]}, token=tenant.token
    )
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_settle_writes_its_deliveries_in_the_same_statement(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    """No worker: cancelling a QUEUED run settles it in the request's unit of work (through the
    session), and the deliveries of the subscribed endpoints are there with it; the other
    tenant's endpoint, and an endpoint of another event, get none."""
    await api.gql(CREATE, {"url": "http://127.0.0.1:9/all"}, token=tenant.token)
    await api.gql(
        CREATE, {"url": "http://127.0.0.1:9/ok", "events": ["run.succeeded"]}, token=tenant.token
    )
    await api.gql(CREATE, {"url": "http://127.0.0.1:9/other"}, token=other_tenant.token)
    started = await api.start_run(tenant.token, "demo", {"turns": 1})
    assert (await api.cancel(tenant.token, started["run"]["id"]))["status"] == "CANCELLED"

    mine = (await api.gql(ENDPOINTS, token=tenant.token))["webhookEndpoints"]
    by_url = {e["url"]: e["deliveries"] for e in mine}
    assert by_url["http://127.0.0.1:9/ok"] == []
    (delivery,) = by_url["http://127.0.0.1:9/all"]
    assert (delivery["eventType"], delivery["status"], delivery["attempts"]) == (
        "run.cancelled",
        "PENDING",
        0,
    )
    theirs = (await api.gql(ENDPOINTS, token=other_tenant.token))["webhookEndpoints"]
    assert theirs[0]["deliveries"] == []
