"""A request's line and headers are capped in the API process itself (issue 19, item 4: a 64 MiB
header on /healthz cost 4 s of CPU): past `OUTLIVE_API_MAX_HEADER_BYTES` the server answers 431
and closes, whatever the load balancer does. Against uvicorn on a real socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from tests.conftest import make_settings
from tests.realtime.clients import Served, serve
from tests.support import Servers, service_env, spawn_outlive
from tests.telemetry.test_metrics import free_port, wait_ready

pytestmark = pytest.mark.timeout(60)

KIB = 1024


@contextlib.asynccontextmanager
async def _raw(
    served: Served | str,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    parts = urlsplit(served if isinstance(served, str) else served.url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes."""
    async with asyncio.timeout(20):
        return await reader.read(-1)


def _get(header_bytes: int) -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * header_bytes + b"\r\n\r\n"


async def test_a_head_over_the_cap_is_answered_431_and_closed(servers: Servers) -> None:
    async with serve(make_settings(servers)) as served:  # the default: 64 KiB
        async with _raw(served) as (reader, writer):
            writer.write(_get(60 * KIB))  # under it: served
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
        async with _raw(served) as (reader, writer):
            writer.write(_get(65 * KIB))
            await writer.drain()
            answer = await _answer(reader)
            assert answer.startswith(b"HTTP/1.1 431 ")


async def test_a_header_streamed_without_end_is_cut_off_at_the_cap(servers: Servers) -> None:
    """The 64 MiB header of the finding, sent in pieces: the server answers once the cap is
    crossed, without waiting for (or holding) the rest."""
    async with (
        serve(make_settings(servers, api_max_header_bytes=16 * KIB)) as served,
        _raw(served) as (reader, writer),
    ):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < 64 * 1024 * KIB and not reader.at_eof():
                writer.write(b"a" * (4 * KIB))
                await writer.drain()
                sent += 4 * KIB
                if sent >= 32 * KIB:  # past the cap: the answer is already on its way
                    break
        answer = await _answer(reader)
        assert answer.startswith(b"HTTP/1.1 431 ")


async def test_the_cap_holds_for_a_later_request_on_a_kept_alive_connection(
    servers: Servers,
) -> None:
    async with (
        serve(make_settings(servers, api_max_header_bytes=8 * KIB)) as served,
        _raw(served) as (reader, writer),
    ):
        writer.write(_get(4 * KIB))
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(_get(20 * KIB))
        await writer.drain()
        rest = await _answer(reader)  # the first response's body, then the 431
        assert b"HTTP/1.1 431 " in rest


async def test_a_large_body_is_not_a_large_head(servers: Servers) -> None:
    """Only the head is capped: a body that arrives with it in one write is the body's limit's."""
    async with (
        serve(make_settings(servers, api_max_header_bytes=4 * KIB)) as served,
        _raw(served) as (reader, writer),
    ):
        body = b'{"query": "{ __typename }", "pad": "' + b"x" * (64 * KIB) + b'"}'
        writer.write(
            b"POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert not head.startswith(b"HTTP/1.1 431"), head
        assert head.startswith(b"HTTP/1.1 ")


async def test_outlive_api_with_workers_caps_the_head_from_its_setting(servers: Servers) -> None:
    """`outlive api --workers 2`: the setting reaches every worker process (the config is
    pickled across)."""
    port = free_port()
    env = service_env(make_settings(servers), OUTLIVE_API_MAX_HEADER_BYTES=str(8 * KIB))
    process = spawn_outlive("api", "--port", str(port), "--workers", "2", env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(url)
        for _ in range(4):  # whichever worker accepts the connection
            async with _raw(url) as (reader, writer):
                writer.write(_get(12 * KIB))
                await writer.drain()
                assert (await _answer(reader)).startswith(b"HTTP/1.1 431 ")
        async with _raw(url) as (reader, writer):
            writer.write(_get(4 * KIB))
            await writer.drain()
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)
