"""The socket itself (contract §3): auth by `connection_init`, limits, pings, origins, deflate."""

from __future__ import annotations

import asyncio
import time

import pytest
from websockets.exceptions import InvalidStatus

from outlive.app import CONNECTION_INIT_TIMEOUT, MAX_OPERATIONS_PER_SOCKET
from outlive.config import Settings
from tests.conftest import make_settings
from tests.realtime.clients import PLAIN, Served, Socket, serve
from tests.support import Servers, TenantHandle


@pytest.mark.parametrize(
    "payload",
    [
        {"authorization": "Bearer not-a-token"},
        {"authorization": "not-bearer"},
        {},
        {"Authorization": "Bearer "},
    ],
    ids=["unknown", "no-scheme", "missing", "empty"],
)
async def test_a_missing_or_bad_token_closes_with_4403(
    served: Served, payload: dict[str, str]
) -> None:
    async with Socket.open(served.url) as sock:
        await sock.send({"type": "connection_init", "payload": payload})
        assert await sock.closed() == (4403, "Forbidden")


async def test_a_subscribe_before_connection_init_is_refused(
    served: Served, tenant: TenantHandle
) -> None:
    async with Socket.open(served.url) as sock:
        await sock.send({"type": "subscribe", "id": "1", "payload": {"query": PLAIN}})
        code, _ = await sock.closed()
    assert code == 4401
    assert served.hub.subscriber_count == 0


async def test_a_client_that_never_sends_connection_init_is_closed_within_10_s(
    served: Served,
) -> None:
    began = time.monotonic()
    async with Socket.open(served.url) as sock:
        code, _ = await sock.closed(timeout=CONNECTION_INIT_TIMEOUT.total_seconds() + 5)
    waited = time.monotonic() - began
    assert code == 4408
    assert waited <= CONNECTION_INIT_TIMEOUT.total_seconds() + 0.5


async def test_a_connection_holds_at_most_a_handful_of_subscriptions(
    served: Served, tenant: TenantHandle
) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        for i in range(MAX_OPERATIONS_PER_SOCKET):
            await sock.subscribe(id=str(i))
        await sock.send({"type": "subscribe", "id": "extra", "payload": {"query": PLAIN}})
        refused = await sock.receive()
        await served.subscribers(MAX_OPERATIONS_PER_SOCKET)
    assert refused["type"] == "error"
    assert refused["id"] == "extra"
    assert refused["payload"][0]["message"] == "Subscription limit reached"


async def test_client_pings_are_answered_both_ways(served: Served, tenant: TenantHandle) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.send({"type": "ping", "payload": {"n": 1}})
        assert (await sock.receive())["type"] == "pong"  # graphql-transport-ws
        async with asyncio.timeout(5):
            await (await sock.ws.ping(b"outlive"))  # a WebSocket ping frame


async def test_per_message_deflate_is_off_even_when_the_client_offers_it(
    served: Served, tenant: TenantHandle
) -> None:
    async with Socket.open(served.url, token=tenant.token, compression="deflate") as sock:
        assert sock.ws.request is not None
        assert sock.ws.response is not None
        assert "permessage-deflate" in sock.ws.request.headers["Sec-WebSocket-Extensions"]
        assert "Sec-WebSocket-Extensions" not in sock.ws.response.headers


async def test_allowed_origins_admit_an_spa_served_elsewhere(
    servers: Servers, tenant: TenantHandle
) -> None:
    settings = make_settings(
        servers, allowed_origins="https://app.example.com, http://spa.test:5173"
    )
    async with serve(settings) as served:
        for origin in ("https://app.example.com", "http://spa.test:5173"):
            async with Socket.open(served.url, token=tenant.token, origin=origin) as sock:
                await sock.subscribe()
        with pytest.raises(InvalidStatus) as refused:
            async with Socket.open(served.url, origin="https://evil.example.com"):
                pass
        assert refused.value.response.status_code == 403
        async with Socket.open(served.url, token=tenant.token, origin=served.url) as sock:
            await sock.subscribe()  # the same origin is always allowed


async def test_a_cross_origin_page_is_refused_by_default(settings: Settings) -> None:
    assert settings.allowed_origins == []
    async with serve(settings) as served:
        with pytest.raises(InvalidStatus) as refused:
            async with Socket.open(served.url, origin="https://app.example.com"):
                pass
    assert refused.value.response.status_code == 403
