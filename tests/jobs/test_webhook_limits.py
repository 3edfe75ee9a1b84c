"""A hostile endpoint cannot hold a worker: the response is read at most a few KiB, one deadline
covers the whole attempt, no connection outlives its delivery, and the endpoints cap holds under
concurrent creates."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.jobs.test_webhooks import CREATE, ENDPOINTS, _settle_a_run, _wait_delivery
from tests.support import Api, NudgeWatch, Servers, TenantHandle, loopback_server

Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_endpoint(reply: Reply) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server on loopback that reads a request's head and answers with `reply`; yields
    its URL and the number of bytes each connection managed to send before it was dropped."""
    sent: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        counting = _Counting(writer)
        with contextlib.suppress(ConnectionError, OSError):
            await reply(counting)  # type: ignore[arg-type]
        sent.append(counting.sent)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/hook", sent
        server.close()


class _Counting:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.sent = 0

    def write(self, data: bytes) -> None:
        self._writer.write(data)
        self.sent += len(data)

    async def drain(self) -> None:
        await self._writer.drain()


async def endless_body(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\r\n")
    chunk = b"x" * 65_536
    while True:  # 400 MB in the report; here, until the client hangs up
        writer.write(chunk)
        await writer.drain()


async def trickle(writer: asyncio.StreamWriter) -> None:
    """One byte of the status line at a time: no read is ever idle for 10 s."""
    for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok":
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.2)  # the hostile endpoint's pace, not a wait for an event


async def test_an_endless_response_body_is_not_read_to_its_end(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    async with raw_endpoint(endless_body) as (url, sent):
        await api.gql(CREATE, {"url": url}, token=tenant.token)
        async with (
            jobs_world() as world,
            NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
        ):
            await _settle_a_run(api, watch, tenant.token)
            delivery = await _wait_delivery(api, watch, tenant.token, "DELIVERED")
    assert delivery["responseStatus"] == 200
    assert len(sent) == 1
    assert sent[0] < 64 * 1024 * 1024  # the client hung up long before (socket buffers aside)


async def test_one_deadline_covers_the_whole_attempt(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    async with raw_endpoint(trickle) as (url, _):
        await api.gql(CREATE, {"url": url}, token=tenant.token)
        async with (
            jobs_world(webhook_timeout_s=1, job_max_attempts=1) as world,
            NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
        ):
            await _settle_a_run(api, watch, tenant.token)
            delivery = await _wait_delivery(api, watch, tenant.token, "FAILED")
    assert delivery["lastError"] == "no answer within 1s"
    assert delivery["responseStatus"] is None


async def test_no_connection_is_reused_from_one_delivery_to_the_next(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    """A kept-alive connection was verified (TLS) for one host name and could carry the next
    delivery to the same address for another: each delivery opens and closes its own."""
    seen: list[tuple[int, str]] = []

    async def hook(request: Request) -> Response:
        assert request.client is not None
        seen.append((request.client.port, request.headers.get("connection", "")))
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with loopback_server(app) as base:
        await api.gql(CREATE, {"url": f"{base}/hook"}, token=tenant.token)
        async with (
            jobs_world() as world,
            NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
        ):
            for expected in (1, 2):  # one after the other: a pooled connection would be idle
                await _settle_a_run(api, watch, tenant.token)

                async def delivered(count: int = expected) -> bool | None:
                    data = await api.gql(ENDPOINTS, token=tenant.token)
                    done = [
                        d
                        for d in data["webhookEndpoints"][0]["deliveries"]
                        if d["status"] == "DELIVERED"
                    ]
                    return True if len(done) == count else None

                await watch.until_true(delivered, 30, f"{expected} deliveries")
    assert len(seen) == 2
    assert seen[0][0] != seen[1][0]
    assert [connection for _, connection in seen] == ["close", "close"]


async def test_the_endpoints_cap_holds_under_concurrent_creates(
    servers: Servers, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, webhook_max_endpoints=5, rate_create_webhook="off")
    async with Api.running(settings) as api:
        responses = await asyncio.gather(
            *(
                api.post(CREATE, {"url": f"http://127.0.0.1:9/{i}"}, token=tenant.token)
                for i in range(30)
            )
        )
        data = await api.gql(ENDPOINTS, token=tenant.token)
    refused = [r.json()["errors"][0] for r in responses if r.json().get("errors")]
    assert len(data["webhookEndpoints"]) == 5
    assert len(refused) == 25
    assert {e["extensions"]["code"] for e in refused} == {"BAD_USER_INPUT"}
    assert {e["message"] for e in refused} == {"a tenant has at most 5 webhook endpoints"}
