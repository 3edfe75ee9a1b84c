"""The server's own limits: a deadline for a request's headers, the largest WebSocket message
(enforced before authentication), and a cap on connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx

from tests.conftest import make_settings
from tests.realtime.clients import Served, Socket, serve
from tests.support import Servers, TenantHandle


@contextlib.asynccontextmanager
async def _raw(served: Served) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    parts = urlsplit(served.url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def test_a_request_whose_headers_trickle_in_is_dropped(servers: Servers) -> None:
    async with serve(make_settings(servers, api_header_timeout_s=0.5)) as served:
        async with _raw(served) as (reader, writer):
            writer.write(b"POST /graphql HTTP/1.1\r\nHost: outlive.test\r\nX-Slow: 1\r\n")
            await writer.drain()  # ...and the rest of the headers never come
            async with asyncio.timeout(10):
                assert await reader.read() == b""  # closed by the server
        async with _raw(served) as (reader, _):  # a connection that never says a word
            async with asyncio.timeout(10):
                assert await reader.read() == b""
        async with httpx.AsyncClient(base_url=served.url) as client:
            assert (await client.get("/healthz")).status_code == 200  # a brisk one is served


async def test_a_later_request_on_a_kept_alive_connection_has_the_same_deadline(
    servers: Servers,
) -> None:
    async with (
        serve(make_settings(servers, api_header_timeout_s=0.5)) as served,
        _raw(served) as (reader, writer),
    ):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: outlive.test\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(b"GET /healthz HTTP/1.1\r\n")  # the next one stalls after its first line
        await writer.drain()
        async with asyncio.timeout(10):
            while await reader.read(65_536):
                pass  # the first response's body, then the close


async def test_a_websocket_message_over_the_limit_closes_the_socket_before_authentication(
    servers: Servers, tenant: TenantHandle
) -> None:
    async with (
        serve(make_settings(servers, ws_max_bytes=64 * 1024)) as served,
        Socket.open(served.url) as sock,
    ):
        await sock.send({"type": "ping", "payload": {"x": "y" * 100_000}})
        assert (await sock.closed())[0] == 1009  # message too big; never parsed
    async with serve(make_settings(servers)) as served, Socket.open(served.url) as sock:
        await sock.send({"type": "ping", "payload": {"x": "y" * 60_000}})  # under the default
        assert (await sock.receive())["type"] == "pong"


async def test_past_the_concurrency_limit_the_server_answers_503(
    servers: Servers, tenant: TenantHandle
) -> None:
    async with (
        serve(make_settings(servers, api_limit_concurrency=3)) as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        assert (await client.get("/healthz")).status_code == 200
        async with (
            Socket.open(served.url, token=tenant.token),
            Socket.open(served.url, token=tenant.token),
            httpx.AsyncClient(base_url=served.url) as fresh,  # a new connection: the third
        ):
            assert (await fresh.get("/healthz")).status_code == 503
