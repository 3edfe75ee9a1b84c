"""`ctx.public_http` checks destinations as webhooks do (security review round 4: I7). Before,
an agent had only `ctx.http`, with no guard: a third-party agent that fetched a URL from a
tenant's input reached loopback, the private network and the cloud's metadata address."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services import destinations
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

AGENT = "tests.isolation.fetch_agent:AGENT"


@pytest.fixture
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback HTTP server: its port, and the requests it was sent."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], seen


async def test_an_agents_public_client_refuses_the_internal_network(
    servers: Servers,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    listener: tuple[int, list[bytes]],
) -> None:
    port, seen = listener
    guarded = make_settings(servers, agent_modules=[AGENT], webhook_allow_private=False)
    guarded = guarded.model_copy(update={"database_url": settings.database_url})
    assert settings.redis_url is not None
    async with (
        Api.running(guarded) as api,
        NudgeWatch(settings.redis_url, sessions, tenant.id) as watch,
    ):
        host = WorkerHost(guarded, concurrency=2)
        await host.start()
        try:
            started = await api.start_run(
                tenant.token, "fetcher", {"url": f"http://127.0.0.1:{port}/admin"}
            )
            done = await watch.until(started["run"]["id"], settled)
        finally:
            await host.stop()
    assert done.status == "FAILED"
    assert done.error is not None
    assert destinations.NOT_ALLOWED in done.error
    assert seen == []  # nothing reached the loopback server


async def test_the_guard_pins_the_checked_address_and_keeps_the_name() -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    fake = httpx.MockTransport(record)
    refusing = destinations.GuardedTransport(fake, tenant="t", allow_private=False)
    async with httpx.AsyncClient(transport=refusing) as client:
        for url in ("http://localhost:8080/x", "http://169.254.169.254/latest", "file:///etc"):
            with pytest.raises(destinations.UnsafeDestination):
                await client.get(url)
    assert sent == []
    allowing = destinations.GuardedTransport(fake, tenant="t", allow_private=True)
    async with httpx.AsyncClient(transport=allowing) as client:
        assert (await client.get("http://localhost:8080/x?q=1")).status_code == 204
    assert str(sent[0].url) in ("http://127.0.0.1:8080/x?q=1", "http://[::1]:8080/x?q=1")
    assert sent[0].headers["host"] == "localhost:8080"
    assert sent[0].extensions["sni_hostname"] == "localhost"
