"""Webhooks a tenant fixes itself: a failing delivery says when its next attempt is due and is
tried now on request (`retryWebhookDelivery`); deliveries are filtered by status, paged by
`before`, and name their run; `redeliverFailedWebhooks` sends every failed one again and
`retryPendingWebhookDeliveries` tries every waiting one now. Another
tenant can do none of it to yours."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from outlive.db.tx import Sessions
from tests.jobs.test_webhooks import CREATE, _settle_a_run, receiver
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle

__all__ = ["receiver"]  # the fixture, shared with the webhook tests

pytestmark = pytest.mark.timeout(120)

DELIVERY_FIELDS = "id status attempts responseStatus lastError runId nextAttemptAt createdAt"
DELIVERIES = f"""{{ webhookEndpoints {{ id deliveries {{ {DELIVERY_FIELDS} }} }} }}"""
FILTERED = f"""query($status: DeliveryStatus, $before: DateTime) {{ webhookEndpoints {{
  deliveries(status: $status, before: $before) {{ {DELIVERY_FIELDS} }} }} }}"""
RETRY_NOW = (
    f"""mutation($id: ID!) {{ retryWebhookDelivery(deliveryId: $id) {{ {DELIVERY_FIELDS} }} }}"""
)
ONE_ENDPOINT = """query($id: ID!) { webhookEndpoint(id: $id) { id
  deliveries(first: 1, status: PENDING) { id } } }"""
REDELIVER_FAILED = """mutation($id: ID!) { redeliverFailedWebhooks(endpointId: $id) { count } }"""


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


async def _one_delivery(api: Api, token: str) -> dict[str, Any]:
    data = await api.gql(DELIVERIES, token=token)
    (delivery,) = [d for e in data["webhookEndpoints"] for d in e["deliveries"]]
    return delivery


async def _until(api: Api, watch: NudgeWatch, token: str, want: Any, what: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        data = await api.gql(DELIVERIES, token=token)
        found = [d for e in data["webhookEndpoints"] for d in e["deliveries"] if want(d)]
        return found[0] if found else None

    return await watch.until_true(check, 30, what)


async def _until_two(
    api: Api, watch: NudgeWatch, token: str, status: str, what: str, *, waiting: bool = False
) -> list[Any]:
    """The endpoint's two deliveries once both are `status` (`waiting`: and have a retry due)."""

    async def check() -> list[Any] | None:
        data = await api.gql(FILTERED, {"status": status}, token=token)
        found = [
            d
            for d in data["webhookEndpoints"][0]["deliveries"]
            if d["nextAttemptAt"] or not waiting
        ]
        return found if len(found) == 2 else None

    found: list[Any] = await watch.until_true(check, 30, what)
    return found


async def test_retry_now_tries_a_failing_delivery_at_once_and_only_for_its_tenant(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    receiver: Any,
) -> None:
    r, url = receiver
    r.statuses = [500]  # the first attempt fails; its retry would be an hour away
    async with jobs_world(job_retry_base_s=3600, job_retry_max_s=3600, job_max_attempts=3) as world:
        await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            run_id = await _settle_a_run(api, watch, tenant.token)
            waiting = await _until(
                api, watch, tenant.token, lambda d: d["nextAttemptAt"], "a retry scheduled"
            )
            due = _at(waiting["nextAttemptAt"]) - datetime.now(UTC)
            assert timedelta(minutes=55) < due <= timedelta(hours=1)
            assert (waiting["status"], waiting["attempts"], waiting["responseStatus"]) == (
                "PENDING",
                1,
                500,
            )
            assert waiting["runId"] == run_id
            with pytest.raises(GraphQLError) as caught:
                await api.gql(RETRY_NOW, {"id": waiting["id"]}, token=other_tenant.token)
            assert caught.value.codes == ["NOT_FOUND"]
            assert (await _one_delivery(api, tenant.token))["nextAttemptAt"] == waiting[
                "nextAttemptAt"
            ]  # the other tenant's try changed nothing
            now = (await api.gql(RETRY_NOW, {"id": waiting["id"]}, token=tenant.token))[
                "retryWebhookDelivery"
            ]
            assert now["status"] == "PENDING"
            assert _at(now["nextAttemptAt"]) <= datetime.now(UTC) + timedelta(seconds=5)
            delivered = await _until(
                api, watch, tenant.token, lambda d: d["status"] == "DELIVERED", "delivered"
            )
    assert (delivered["attempts"], delivered["nextAttemptAt"]) == (2, None)
    assert len(r.received) == 2
    again = (await api.gql(RETRY_NOW, {"id": delivered["id"]}, token=tenant.token))[
        "retryWebhookDelivery"
    ]
    assert (again["status"], again["attempts"]) == ("DELIVERED", 2)  # settled: unchanged


async def test_deliveries_are_filtered_by_status_and_paged_and_name_their_run(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, receiver: Any
) -> None:
    _, url = receiver
    created = await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
    endpoint = created["createWebhookEndpoint"]["endpoint"]["id"]
    runs = []
    for _ in range(2):  # QUEUED runs cancel at once; no worker sends their deliveries
        run = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
        await api.cancel(tenant.token, run)
        runs.append(run)
    pending = (await api.gql(FILTERED, {"status": "PENDING"}, token=tenant.token))[
        "webhookEndpoints"
    ][0]["deliveries"]
    assert sorted(d["runId"] for d in pending) == sorted(runs)
    assert all(d["nextAttemptAt"] is None for d in pending)  # never tried: not waiting
    failed = await api.gql(FILTERED, {"status": "FAILED"}, token=tenant.token)
    assert failed["webhookEndpoints"][0]["deliveries"] == []
    newest, older = pending
    page = await api.gql(FILTERED, {"before": newest["createdAt"]}, token=tenant.token)
    assert [d["id"] for d in page["webhookEndpoints"][0]["deliveries"]] == [older["id"]]
    same = (await api.gql(RETRY_NOW, {"id": newest["id"]}, token=tenant.token))[
        "retryWebhookDelivery"
    ]
    assert (same["status"], same["nextAttemptAt"]) == ("PENDING", None)  # nothing to bring on
    with pytest.raises(GraphQLError) as caught:
        await api.gql(RETRY_NOW, {"id": str(uuid.uuid4())}, token=tenant.token)
    assert caught.value.codes == ["NOT_FOUND"]
    one = await api.gql(ONE_ENDPOINT, {"id": endpoint}, token=tenant.token)
    assert [d["id"] for d in one["webhookEndpoint"]["deliveries"]] == [newest["id"]]
    theirs = await api.gql(ONE_ENDPOINT, {"id": endpoint}, token=other_tenant.token)
    assert theirs["webhookEndpoint"] is None


async def test_redeliver_failed_sends_every_failed_delivery_of_the_endpoint_again(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    receiver: Any,
) -> None:
    r, url = receiver
    r.statuses = [500, 500]  # two deliveries fail for good (one attempt each), then 200s
    async with jobs_world(job_retry_base_s=0.1, job_max_attempts=1) as world:
        created = await api.gql(
            CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token
        )
        endpoint = created["createWebhookEndpoint"]["endpoint"]["id"]
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            for _ in range(2):
                await _settle_a_run(api, watch, tenant.token)

            await _until_two(api, watch, tenant.token, "FAILED", "two failed deliveries")
            with pytest.raises(GraphQLError) as caught:
                await api.gql(REDELIVER_FAILED, {"id": endpoint}, token=other_tenant.token)
            assert caught.value.codes == ["NOT_FOUND"]
            sent = await api.gql(REDELIVER_FAILED, {"id": endpoint}, token=tenant.token)
            assert sent["redeliverFailedWebhooks"]["count"] == 2

            delivered = await _until_two(api, watch, tenant.token, "DELIVERED", "both delivered")
    assert sorted(d["attempts"] for d in delivered) == [2, 2]
    assert len(r.received) == 4


RETRY_PENDING = """mutation($id: ID!) {
  retryPendingWebhookDeliveries(endpointId: $id) { count } }"""


async def test_retry_all_pending_tries_each_waiting_delivery_of_the_endpoint_now(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    receiver: Any,
) -> None:
    r, url = receiver
    r.statuses = [500, 500]  # each delivery's first attempt fails; its retry is an hour away
    async with jobs_world(job_retry_base_s=3600, job_retry_max_s=3600, job_max_attempts=3) as world:
        created = await api.gql(
            CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token
        )
        endpoint = created["createWebhookEndpoint"]["endpoint"]["id"]
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            for _ in range(2):
                await _settle_a_run(api, watch, tenant.token)

            await _until_two(
                api, watch, tenant.token, "PENDING", "two deliveries waiting", waiting=True
            )
            with pytest.raises(GraphQLError) as caught:
                await api.gql(RETRY_PENDING, {"id": endpoint}, token=other_tenant.token)
            assert caught.value.codes == ["NOT_FOUND"]
            tried = await api.gql(RETRY_PENDING, {"id": endpoint}, token=tenant.token)
            assert tried["retryPendingWebhookDeliveries"]["count"] == 2

            delivered = await _until_two(api, watch, tenant.token, "DELIVERED", "both delivered")
            again = await api.gql(RETRY_PENDING, {"id": endpoint}, token=tenant.token)
    assert again["retryPendingWebhookDeliveries"]["count"] == 0  # nothing waits any more
    assert sorted(d["attempts"] for d in delivered) == [2, 2]
    assert all(d["lastError"] is None for d in delivered)
    assert len(r.received) == 4


SEND_TEST = """mutation($id: ID!) { sendTestWebhook(endpointId: $id) {
  id eventType status runId } }"""


async def test_send_test_event_delivers_a_signed_webhook_test_to_that_endpoint_only(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    receiver: Any,
) -> None:
    r, url = receiver
    async with jobs_world() as world:
        created = await api.gql(CREATE, {"url": url, "events": ["run.failed"]}, token=tenant.token)
        endpoint = created["createWebhookEndpoint"]["endpoint"]["id"]
        with pytest.raises(GraphQLError) as caught:
            await api.gql(SEND_TEST, {"id": endpoint}, token=other_tenant.token)
        assert caught.value.codes == ["NOT_FOUND"]
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            sent = (await api.gql(SEND_TEST, {"id": endpoint}, token=tenant.token))[
                "sendTestWebhook"
            ]
            assert (sent["eventType"], sent["status"], sent["runId"]) == (
                "webhook.test",
                "PENDING",
                None,
            )
            await _until(
                api, watch, tenant.token, lambda d: d["status"] == "DELIVERED", "delivered"
            )
    ((headers, body),) = r.received
    assert json.loads(body)["type"] == "webhook.test"
    assert json.loads(body)["data"] == {"endpointId": endpoint}
    assert headers["webhook-signature"].startswith("v1,")
