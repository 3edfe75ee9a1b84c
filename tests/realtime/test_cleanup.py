"""The subscription's cleanup (leaving the hub) runs on every kind of disconnect, on both paths: the
shared-frame path of the plain selection, and strawberry's own execution of any other document."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest

from outlive.config import Settings
from outlive.realtime.hub import MAX_PENDING
from outlive.realtime.nudges import Nudge
from tests.realtime.clients import PLAIN, Served, Socket, publisher, serve
from tests.support import TenantHandle

# The same selection, but with a directive: strawberry executes it per subscriber.
EXECUTED = "subscription { nudges { type @include(if: true) tenantId at id } }"
PATHS = pytest.mark.parametrize("query", [PLAIN, EXECUTED], ids=["shared", "executed"])


@asynccontextmanager
async def subscribed(
    served: Served, tenant: TenantHandle, query: str, **options: object
) -> AsyncIterator[Socket]:
    async with Socket.open(served.url, token=tenant.token, **options) as sock:
        await sock.subscribe(query)
        await served.subscribers(1)
        yield sock


def nudge(tenant: TenantHandle) -> Nudge:
    return Nudge("run.updated", tenant.id, datetime.now(UTC), uuid.uuid4())


@PATHS
async def test_complete_leaves_the_hub_and_the_socket_open(
    served: Served, tenant: TenantHandle, query: str
) -> None:
    async with subscribed(served, tenant, query) as sock:
        await sock.send({"type": "complete", "id": "1"})
        await served.subscribers(0)
        await sock.subscribe(query, id="2")  # the same connection goes on
        await served.subscribers(1)
    await served.subscribers(0)


@PATHS
async def test_a_client_close_leaves_the_hub(
    served: Served, tenant: TenantHandle, query: str
) -> None:
    async with subscribed(served, tenant, query) as sock:
        await sock.ws.close(1000)
    await served.subscribers(0)


@PATHS
async def test_a_dropped_connection_leaves_the_hub(
    served: Served, tenant: TenantHandle, query: str
) -> None:
    async with subscribed(served, tenant, query) as sock:
        sock.ws.transport.abort()  # no close frame: the TCP connection is simply gone
        await served.subscribers(0)


@PATHS
async def test_a_dead_peer_is_dropped_by_uvicorns_pings_and_leaves_the_hub(
    settings: Settings, tenant: TenantHandle, query: str
) -> None:
    async with (
        serve(settings, ws_ping_interval=0.3, ws_ping_timeout=0.3) as served,
        subscribed(served, tenant, query) as sock,
    ):
        sock.ws.transport.pause_reading()  # alive for TCP, deaf to pings
        await served.subscribers(0)
        sock.ws.transport.resume_reading()
        code, _ = await sock.closed()
    assert code == 1011  # keepalive ping timeout


@PATHS
async def test_a_server_shutdown_closes_with_1012_and_leaves_the_hub(
    settings: Settings, tenant: TenantHandle, query: str
) -> None:
    async with serve(settings) as served, subscribed(served, tenant, query) as sock:
        served.server.should_exit = True
        code, _ = await sock.closed()
        await served.subscribers(0)
    assert code == 1012


@PATHS
async def test_a_socket_too_far_behind_is_closed_with_1013_and_leaves_the_hub(
    served: Served, settings: Settings, tenant: TenantHandle, query: str
) -> None:
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", int(served.url.rsplit(":", 1)[1])))
    async with (
        subscribed(served, tenant, query, sock=stalled, max_queue=1) as sock,
        publisher(settings) as pub,
    ):
        sock.ws.transport.pause_reading()
        sent = 0
        waiting = asyncio.create_task(served.subscribers(0, timeout=60))
        while not waiting.done():  # distinct ids: nothing to coalesce; the buffer must overflow
            await pub.send([nudge(tenant) for _ in range(200)])
            sent += 200
            await asyncio.wait({waiting}, timeout=0.05)
        await waiting
        assert sent > MAX_PENDING
        sock.ws.transport.resume_reading()
        code, reason = await sock.closed(timeout=30)
    assert (code, reason) == (1013, "too far behind: reconnect and refetch")
