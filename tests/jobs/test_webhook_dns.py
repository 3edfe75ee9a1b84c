"""A webhook's host name is the tenant's, and so is how slowly it resolves (issue 19, item 5):
`createWebhookEndpoint` gives a lookup `RESOLVE_TIMEOUT_S` and refuses the name after it, and a
delivery's lookup runs inside the delivery's one deadline. The name server that never answers is
the one thing faked here, at the lookup seam (`destinations.lookup`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from outlive.db.tx import Sessions
from outlive.services import destinations
from tests.jobs.test_webhooks import CREATE, _settle_a_run, _wait_delivery
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle

pytestmark = pytest.mark.timeout(120)


class SlowDns:
    """Names in `silent` never resolve (a name server that does not answer); `answers` are
    served at once; anything else goes to the real resolver."""

    def __init__(self) -> None:
        self.silent: set[str] = set()
        self.answers: dict[str, list[str]] = {}
        self.real = destinations.lookup

    async def lookup(self, host: str, port: int) -> list[str]:
        if host in self.silent:
            await asyncio.Event().wait()
        if host in self.answers:
            return self.answers[host]
        return await self.real(host, port)


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> SlowDns:
    fake = SlowDns()
    monkeypatch.setattr(destinations, "lookup", fake.lookup)
    return fake


async def test_creating_an_endpoint_whose_name_never_resolves_is_refused_in_time(
    api: Api, tenant: TenantHandle, dns: SlowDns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(destinations, "RESOLVE_TIMEOUT_S", 0.3)
    dns.silent.add("slow.test")
    async with asyncio.timeout(10):  # without a deadline of its own it would wait forever
        with pytest.raises(GraphQLError) as refused:
            await api.gql(CREATE, {"url": "https://slow.test/hook"}, token=tenant.token)
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert refused.value.errors[0]["message"] == destinations.NOT_ALLOWED  # like any other


async def test_a_deliverys_lookup_runs_inside_its_deadline(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, dns: SlowDns
) -> None:
    dns.answers["hook.test"] = ["127.0.0.1"]
    await api.gql(
        CREATE, {"url": "http://hook.test:9/hook", "events": ["run.cancelled"]}, token=tenant.token
    )
    dns.silent.add("hook.test")  # from now on its name server never answers
    async with jobs_world(webhook_timeout_s=0.5, job_max_attempts=1) as world:
        assert world.settings.redis_url is not None
        async with NudgeWatch(world.settings.redis_url, sessions, tenant.id) as watch:
            await _settle_a_run(api, watch, tenant.token)
            failed = await _wait_delivery(api, watch, tenant.token, "FAILED")
    assert failed["lastError"] == "no answer within 0.5s"  # the attempt's deadline, DNS included
