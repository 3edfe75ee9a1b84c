"""A webhook's host name is the tenant's, and so is how slowly it resolves (issue 19, item 5):
`createWebhookEndpoint` gives a lookup `RESOLVE_TIMEOUT_S` and refuses the name after it, and a
delivery's lookup runs inside the delivery's one deadline. The name server that never answers is
the one thing faked here, at the lookup seam (`destinations.lookup`)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from outlive.db.tx import Sessions
from outlive.services import destinations
from tests.jobs.test_webhooks import (  # noqa: F401 (`receiver`: a fixture)
    CREATE,
    ENDPOINTS,
    Receiver,
    _settle_a_run,
    _wait_delivery,
    receiver,
)
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


class HangingResolver:
    """The system resolver, except that names under `.slow.attacker.test` hang in their thread
    (a name server that never answers: glibc's own timeouts are long) until `release`, and
    `instant` names answer at once. The real pool threads are held, as the review's repro did."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.release = threading.Event()
        self.hung = 0
        self.instant: dict[str, str] = {}
        self.failing: set[str] = set()

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".slow.attacker.test"):
            self.hung += 1
            self.release.wait(60)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if isinstance(host, str) and host in self.failing:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if isinstance(host, str) and host in self.instant:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (self.instant[host], port))]
        return self.real(host, port, *args, **kwargs)


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[HangingResolver]:
    fake = HangingResolver(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    yield fake
    fake.release.set()


async def test_one_tenants_hanging_name_server_leaves_anothers_lookups_alone(
    resolver: HangingResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 4, M2: 16 of tenant A's lookups hang their threads; B's name still resolves at once
    (before: A held all 8 threads, and B's lookup was refused as "destination not allowed")."""
    monkeypatch.setattr(destinations, "RESOLVE_TIMEOUT_S", 0.5)
    resolver.instant["hooks.victim.example"] = "93.184.216.34"

    async def attack(i: int) -> None:
        url = f"https://h{i}.slow.attacker.test/hook"
        with pytest.raises((destinations.LookupFailed, TimeoutError)):
            async with asyncio.timeout(2):
                await destinations.resolve_public(url, allow_private=False, tenant="a")

    attacks = asyncio.gather(*(attack(i) for i in range(16)))
    for _ in range(100):  # until A's lookups are in their threads
        if resolver.hung >= destinations.TENANT_LOOKUPS:
            break
        await asyncio.sleep(0.02)
    assert resolver.hung == destinations.TENANT_LOOKUPS  # A holds its 2 threads, no more
    async with asyncio.timeout(2):
        found = await destinations.resolve_public(
            "https://hooks.victim.example/hook", allow_private=False, tenant="b"
        )
    assert found == ("hooks.victim.example", "93.184.216.34")
    await attacks
    assert resolver.hung == destinations.TENANT_LOOKUPS


async def test_a_name_that_does_not_resolve_is_retried_not_failed(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    resolver: HangingResolver,
    receiver: tuple[Receiver, str],  # noqa: F811 (the fixture imported above)
) -> None:
    """A lookup failure (a timeout, a SERVFAIL) is the name server's state for now: the delivery
    is retried, and delivered once the name resolves (before: FAILED for good)."""
    _, url = receiver
    port = url.split(":")[2].split("/")[0]
    resolver.instant["hook.flaky.test"] = "127.0.0.1"
    await api.gql(
        CREATE,
        {"url": f"http://hook.flaky.test:{port}/hook", "events": ["run.cancelled"]},
        token=tenant.token,
    )
    resolver.failing.add("hook.flaky.test")  # its name server fails for the first attempt
    async with jobs_world(job_max_attempts=5) as world:
        assert world.settings.redis_url is not None
        async with NudgeWatch(world.settings.redis_url, sessions, tenant.id) as watch:
            await _settle_a_run(api, watch, tenant.token)

            async def attempted() -> bool | None:
                data = await api.gql(ENDPOINTS, token=tenant.token)
                tried = [d for e in data["webhookEndpoints"] for d in e["deliveries"]]
                return True if tried and tried[0]["attempts"] >= 1 else None

            await watch.until_true(attempted, 30, "a first attempt")
            resolver.failing.discard("hook.flaky.test")
            delivered = await _wait_delivery(api, watch, tenant.token, "DELIVERED")
    assert delivered["attempts"] >= 2
