"""The server's own limits: a deadline for a request's headers, the largest WebSocket message
(enforced before authentication), and the caps on in-flight requests and on open sockets,
kept apart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import httpx

from tests.conftest import make_settings
from tests.realtime.clients import Served, Socket, serve
from tests.support import Api, Servers, TenantHandle


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


async def test_past_the_request_cap_the_server_answers_503_and_sockets_do_not_count(
    servers: Servers, tenant: TenantHandle
) -> None:
    """`OUTLIVE_API_LIMIT_CONCURRENCY` caps in-flight HTTP requests, and only them."""
    release = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield b'{"query": "{ __typename }"'
        await release.wait()  # the request stays in flight until then
        yield b"}"

    settings = make_settings(servers, api_limit_concurrency=1, ws_max_sockets=10)
    async with (
        serve(settings) as served,
        httpx.AsyncClient(base_url=served.url) as client,
        httpx.AsyncClient(base_url=served.url) as other,
        Socket.open(served.url, token=tenant.token) as one,
        Socket.open(served.url, token=tenant.token) as two,
    ):
        await one.subscribe()
        await two.subscribe()
        assert (await client.get("/healthz")).status_code == 200  # two sockets: not counted
        headers = {
            "authorization": f"Bearer {tenant.token}",
            "content-type": "application/json",
        }
        held = asyncio.create_task(client.post("/graphql", content=slow_body(), headers=headers))
        await _until(lambda: served.app.requests_in_flight == 1)
        busy = await other.get("/healthz")
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        release.set()
        assert (await held).status_code == 200
        assert (await other.get("/healthz")).status_code == 200


async def test_with_the_socket_cap_reached_a_mutation_answers_and_one_more_socket_gets_1013(
    servers: Servers, tenant: TenantHandle
) -> None:
    """`OUTLIVE_WS_MAX_SOCKETS` caps open sockets apart: a popular tenant's viewers never stop
    its writes (the request cap is 2 too: counted together, the mutation would get a 503)."""
    settings = make_settings(servers, api_limit_concurrency=2, ws_max_sockets=2)
    async with (
        serve(settings) as served,
        Socket.open(served.url, token=tenant.token) as one,
        Socket.open(served.url, token=tenant.token) as two,
        httpx.AsyncClient(base_url=served.url, timeout=30) as client,
    ):
        http = Api(client)
        await one.subscribe()
        await two.subscribe()
        started = await http.start_run(tenant.token, input={"turns": 1})
        assert started["run"]["status"] == "QUEUED"
        async with Socket.open(served.url) as third:
            code, reason = await third.closed()
        assert code == 1013
        assert "too many sockets" in reason
        assert served.app.sockets_open == 2
        for sock in (one, two):  # the two under the cap are untouched, and nudged
            assert (await sock.next_nudge())["id"] == started["run"]["id"]


async def _until(predicate: Callable[[], bool]) -> None:
    """Poll a server-side counter (it has no event to await)."""
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 (a counter of the server's: no event to await)
            await asyncio.sleep(0.01)


async def test_sockets_that_never_sign_in_cannot_take_every_slot(
    servers: Servers, tenant: TenantHandle
) -> None:
    """Round 4, I3: idle sockets with no `connection_init` filled the socket cap, and a tenant's
    socket then closed with 1013. Past `OUTLIVE_WS_MAX_UNAUTHENTICATED` of those, the oldest
    is closed (4408) to make room, and a client that signs in keeps its place."""
    settings = make_settings(servers, ws_max_sockets=4, ws_max_unauthenticated=2)
    async with serve(settings) as served, contextlib.AsyncExitStack() as idle:
        sockets = [await idle.enter_async_context(Socket.open(served.url)) for _ in range(4)]
        code, _ = await sockets[0].closed()  # made room for the third
        assert code == 4408
        await _until(lambda: served.app.sockets_open == 2)
        async with Socket.open(served.url, token=tenant.token) as signed_in:
            await signed_in.subscribe()  # the idle ones did not keep the tenant out
            code, _ = await sockets[2].closed()
            assert code == 4408
