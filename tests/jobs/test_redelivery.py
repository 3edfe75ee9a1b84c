"""redeliverWebhook: a delivered or failed delivery is sent again under the same webhook-id; a
pending one is left alone; another tenant's is NOT_FOUND."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from outlive.db.tx import Sessions
from tests.jobs.test_webhooks import CREATE, ENDPOINTS, _settle_a_run, _wait_delivery, receiver
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle

__all__ = ["receiver"]  # the fixture, shared with the webhook tests

pytestmark = pytest.mark.timeout(120)

REDELIVER = """mutation($id: ID!) { redeliverWebhook(deliveryId: $id) {
  id status attempts responseStatus lastError deliveredAt } }"""


async def test_a_failed_delivery_is_sent_again_under_the_same_webhook_id(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, receiver: Any
) -> None:
    r, url = receiver
    r.statuses = [500]  # the first (and only) attempt fails; then the endpoint is fixed
    async with jobs_world(job_retry_base_s=0.1, job_max_attempts=1) as world:
        await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
        assert world.settings.redis_url is not None
        async with NudgeWatch(world.settings.redis_url, sessions, tenant.id) as watch:
            await _settle_a_run(api, watch, tenant.token)
            failed = await _wait_delivery(api, watch, tenant.token, "FAILED")
            assert failed["attempts"] == 1
            again = (await api.gql(REDELIVER, {"id": failed["id"]}, token=tenant.token))[
                "redeliverWebhook"
            ]
            assert (again["id"], again["status"], again["attempts"]) == (failed["id"], "PENDING", 1)
            delivered = await _wait_delivery(api, watch, tenant.token, "DELIVERED")
            await watch.saw("webhook.delivery.updated")
    assert (delivered["id"], delivered["attempts"]) == (failed["id"], 2)  # the history stays
    first, second = r.received
    assert first[0]["webhook-id"] == second[0]["webhook-id"]  # receivers dedupe on it
    assert first[1] == second[1]


async def test_a_pending_delivery_is_left_alone_and_others_are_not_found(
    api: Api,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    receiver: Any,
    settings: Any,
) -> None:
    from outlive.jobs.queues import JOBS_QUEUE, create_queue
    from tests.jobs.test_consumer import consume_jobs

    _, url = receiver
    await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
    run = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
    await api.cancel(tenant.token, run)  # QUEUED: settles at once; no worker runs the job
    data = await api.gql(ENDPOINTS, token=tenant.token)
    (delivery,) = [d for e in data["webhookEndpoints"] for d in e["deliveries"]]
    assert delivery["status"] == "PENDING"
    queue = create_queue(settings.redis_url, JOBS_QUEUE)
    try:
        before = await consume_jobs(queue)
        same = (await api.gql(REDELIVER, {"id": delivery["id"]}, token=tenant.token))[
            "redeliverWebhook"
        ]
        assert same["status"] == "PENDING"
        assert await consume_jobs(queue) == before == 1  # no second job for it
    finally:
        await queue.disconnect()
    for token, target in (
        (other_tenant.token, delivery["id"]),
        (tenant.token, str(uuid.uuid4())),
    ):
        with pytest.raises(GraphQLError) as caught:
            await api.gql(REDELIVER, {"id": target}, token=token)
        assert caught.value.codes == ["NOT_FOUND"]
    with pytest.raises(GraphQLError) as caught:
        await api.gql(REDELIVER, {"id": "x"}, token=tenant.token)
    assert caught.value.codes == ["BAD_USER_INPUT"]
