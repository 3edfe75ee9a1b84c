"""Per-tenant rate limits: past its rate a mutation answers RATE_LIMITED with retryAfter (in
seconds) and changes nothing; another tenant is never affected."""

from __future__ import annotations

import socket
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from sqlalchemy import func, select

from outlive.config import Rate
from outlive.db.models import Invitation, Run, WebhookEndpoint
from outlive.db.tx import Sessions
from outlive.services.ratelimits import Bucket, RateLimiter
from tests.conftest import make_settings
from tests.support import Api, Servers, TenantHandle

CREATE = "mutation($u: String!) { createWebhookEndpoint(url: $u) { endpoint { id } } }"
INVITE = "mutation($e: String!) { inviteMember(email: $e) { id } }"
START = "mutation($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"


async def _count(sessions: Sessions, model: Any, tenant: TenantHandle) -> int:
    found = await sessions.one(
        select(func.count().label("n")).select_from(model).where(model.tenant_id == tenant.id)
    )
    return int(found["n"]) if found is not None else 0


def _limited(response: Any, within_s: int) -> None:
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED", error
    assert 1 <= error["extensions"]["retryAfter"] <= within_s
    assert response.json()["data"] is None


async def test_start_run_past_its_rate_is_limited_and_writes_nothing(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    async with Api.running(make_settings(servers, rate_start_run="2/60")) as api:
        await api.start_run(tenant.token, "demo", {"turns": 1})
        await api.start_run(tenant.token, "llm", {"prompt": "hi"})
        runs = await _count(sessions, Run, tenant)
        response = await api.post(
            START, {"i": {"agent": "demo", "input": {"turns": 2}}}, token=tenant.token
        )
        _limited(response, within_s=30)  # 2 per minute: the next token in 30 s
        assert await _count(sessions, Run, tenant) == runs == 2
        await api.start_run(other_tenant.token, "demo", {"turns": 1})  # its own bucket


async def test_creating_webhook_endpoints_past_the_rate_is_limited(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    async with Api.running(make_settings(servers, rate_create_webhook="1/3600")) as api:
        await api.gql(CREATE, {"u": "http://127.0.0.1:9/a"}, token=tenant.token)
        _limited(await api.post(CREATE, {"u": "http://127.0.0.1:9/b"}, token=tenant.token), 3600)
        assert await _count(sessions, WebhookEndpoint, tenant) == 1
        await api.gql(CREATE, {"u": "http://127.0.0.1:9/a"}, token=other_tenant.token)


async def test_invitations_are_limited_per_tenant_and_per_recipient(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    settings = make_settings(servers, rate_invite="3/3600", rate_invite_recipient="1/3600")
    async with Api.running(settings) as api:
        await api.gql(INVITE, {"e": "a@x.example"}, token=tenant.token)
        _limited(await api.post(INVITE, {"e": "A@x.example"}, token=tenant.token), 3600)
        await api.gql(INVITE, {"e": "b@x.example"}, token=tenant.token)
        await api.gql(INVITE, {"e": "c@x.example"}, token=tenant.token)
        _limited(await api.post(INVITE, {"e": "d@x.example"}, token=tenant.token), 3600)
        assert await _count(sessions, Invitation, tenant) == 3
        # Another tenant inviting the same address has buckets of its own (and learns nothing).
        await api.gql(INVITE, {"e": "a@x.example"}, token=other_tenant.token)


async def test_the_limiter_lets_actions_through_when_redis_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    redis = Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
    )
    limiter = RateLimiter(redis)
    bucket = Bucket("test", "t", Rate(1, 3600))
    for _ in range(3):
        await limiter.take(bucket, message="limited")  # the action reports the outage itself
    await redis.aclose()
