"""Benchmark: nudge fan-out to idle subscribers, beside a plain Starlette broadcast.

    uv run python bench/nudges.py [--sizes 1000,5000,10000] [--nudges 30] [--verbose]

One `outlive api` process holds N idle subscribers of one tenant (graphql-transport-ws,
`subscription { nudges { type tenantId at id } }`). The floor, measured in the same run, is a plain
Starlette app on the same uvicorn options that keeps its sockets in a set and, for each message on
a Redis channel of its own, sends the same `next` frame (byte for byte) to every socket in a loop.
Each server has a client process of its own: raw asyncio sockets with a minimal WebSocket framing
(it answers pings), so the client costs as little as possible per frame. The sockets are added in
steps (up to 1,000, then 5,000, then 10,000) to the same two server processes.

- memory: the server's RSS once all N sockets are subscribed (and after 1 s of quiet), minus its
  RSS before the first one (after a warm-up of 64 sockets, opened, used once and closed), over N;
- latency: from just before the PUBLISH (the project's own `Publisher.send`, for both servers) to
  the moment the client process reads the frame (CLOCK_MONOTONIC is one clock for every process),
  over every (nudge, socket) receipt. Rounds alternate between the two servers; each one waits for
  every socket's frame before the next publish. The first 3 rounds of each size are not counted.
  "last" is the time until the last socket of a round had its frame (the whole fan-out), p50;
  `--verbose` prints it for every round. "missing" counts frames not received within 30 s
  (Outlive/floor); sockets the servers closed, and warnings in their logs, are printed too.

Targets (issue 20, on this 2-core machine): at most 25 KiB per subscriber; p99 at 10,000
subscribers at most 1.2x the floor's; 0 missing. Needs PostgreSQL and Redis (BENCH_DATABASE_URL,
BENCH_REDIS_URL; default the local ones); raises its open-files limit to the hard limit.

Over 600 lines on purpose: the file is also its own client process (`--clients`) and floor server
(`--floor`), so that the three parts that must agree on one frame and one protocol stay together.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Child, Env, Figures, bench_env, free_port, outlive, spawn, table, wait_http
from redis.asyncio import Redis

from outlive.jobs.queues import create_redis
from outlive.realtime.nudges import Nudge, Publisher, channel_prefix

FLOOR_PREFIX = "bench:floor:nudges:"
FRAME_HEAD = '{"id":"1","type":"next","payload":{"data":{"nudges":'  # Outlive's, for operation "1"
QUERY = "subscription { nudges { type tenantId at id } }"
WARM_SOCKETS = 64
WARM_ROUNDS = 3
CONNECT_CONCURRENCY = 100
ROUND_TIMEOUT_S = 30.0
TARGET_KIB = 25.0
TARGET_RATIO = 1.2
TARGET_SIZE = 10000


# --- the client process: N raw WebSocket clients to one server -----------------------------------

HANDSHAKE = (
    "GET /graphql HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
)
TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA
NUDGE_ID = b'"id":"'  # the nudge's id is the last "id" of a `next` frame


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One masked, final client frame (payloads under 64 KiB)."""
    n = len(payload)
    head = bytes([0x80 | opcode, 0x80 | n]) if n < 126 else bytes([0x80 | opcode, 0xFE])
    if n >= 126:
        head += n.to_bytes(2, "big")
    mask = os.urandom(4)
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return head + mask + (int.from_bytes(payload, "big") ^ key).to_bytes(n, "big")


class Client(asyncio.Protocol):
    """One socket: the upgrade, then (with a token) connection_init, subscribe and a ping whose
    pong says the subscription is registered; without one, the floor's ack. Then frames only."""

    def __init__(self, fleet: Fleet, host: str, token: str | None) -> None:
        self.fleet, self.host, self.token = fleet, host, token
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded = False
        self.closing = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        key = base64.b64encode(os.urandom(16)).decode()
        self.write(HANDSHAKE.format(host=self.host, key=key).encode())

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.buffer += data
        if not self.upgraded:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self.buffer[: self.buffer.find(b"\r\n")])
            del self.buffer[: end + 4]
            if b" 101 " not in status:
                self.fail(f"handshake: {status.decode(errors='replace')}")
                return
            self.upgraded = True
            if self.token is not None:
                payload = {"authorization": f"Bearer {self.token}"}
                self.send({"type": "connection_init", "payload": payload})
        self.read_frames(now)

    def read_frames(self, now: float) -> None:
        buf = self.buffer
        while len(buf) >= 2:
            length, start = buf[1] & 0x7F, 2
            if length == 126:
                length, start = int.from_bytes(buf[2:4], "big"), 4
            elif length == 127:
                length, start = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < start + length:
                return
            opcode, payload = buf[0] & 0x0F, bytes(buf[start : start + length])
            del buf[: start + length]
            self.on_frame(opcode, payload, now)

    def on_frame(self, opcode: int, payload: bytes, now: float) -> None:
        if opcode == TEXT:
            if self.ready.done():
                self.fleet.received(payload, now)
            else:
                self.on_setup(json.loads(payload))
        elif opcode == PING:
            self.write(client_frame(PONG, payload))
        elif opcode == CLOSE:
            code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            self.fleet.lost(self, f"closed by the server: {code} {payload[2:].decode()}")
            self.fail(f"closed by the server: {code}")

    def on_setup(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "connection_ack" and self.token is not None:
            self.send({"type": "subscribe", "id": "1", "payload": {"query": QUERY}})
            self.send({"type": "ping"})
        elif kind in ("connection_ack", "pong"):
            self.ready.set_result(None)
        else:
            self.fail(f"unexpected during setup: {message}")

    def send(self, message: dict[str, Any]) -> None:
        self.write(client_frame(TEXT, json.dumps(message).encode()))

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def fail(self, reason: str) -> None:
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(reason))
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self.closing = True
        self.write(client_frame(CLOSE, (1000).to_bytes(2, "big")))
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closing:
            self.fleet.lost(self, f"dropped: {exc!r}")
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"dropped during setup: {exc!r}"))


@dataclass
class Fleet:
    """Every socket of a client process (all to one server) and the receipt times of each nudge."""

    live: set[Client] = field(default_factory=set)
    receipts: dict[bytes, list[float]] = field(default_factory=dict)
    waiting: tuple[bytes, asyncio.Future[None]] | None = None
    lost_reasons: Counter[str] = field(default_factory=Counter)
    other_frames: int = 0

    def received(self, payload: bytes, now: float) -> None:
        at = payload.rfind(NUDGE_ID)
        if at < 0 or b'"type":"next"' not in payload:
            self.other_frames += 1
            return
        key = payload[at + len(NUDGE_ID) : at + len(NUDGE_ID) + 36]
        times = self.receipts.setdefault(key, [])
        times.append(now)
        self._check(key)

    def lost(self, client: Client, reason: str) -> None:
        if client in self.live:
            self.live.discard(client)
            self.lost_reasons[reason[:200]] += 1
            if self.waiting is not None:
                self._check(self.waiting[0])

    def _check(self, key: bytes) -> None:
        waiting = self.waiting
        if (
            waiting is not None
            and waiting[0] == key
            and not waiting[1].done()
            and len(self.receipts.get(key, ())) >= len(self.live)
        ):
            waiting[1].set_result(None)

    async def open(self, url: str, count: int, token: str | None) -> dict[str, Any]:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
        errors: Counter[str] = Counter()

        async def one() -> None:
            async with gate:
                try:
                    _, client = await loop.create_connection(
                        lambda: Client(self, parts.netloc, token), host, port
                    )
                    async with asyncio.timeout(30):
                        await client.ready
                except (OSError, RuntimeError, TimeoutError) as exc:
                    errors[repr(exc)[:200]] += 1
                    return
                self.live.add(client)

        await asyncio.gather(*(one() for _ in range(count)))
        return {"live": len(self.live), "errors": dict(errors)}

    async def collect(self, nudge_id: str, timeout: float) -> dict[str, Any]:
        """Wait until every live socket has the nudge (or `timeout`); its receipt times."""
        key = nudge_id.encode()
        future = asyncio.get_running_loop().create_future()
        self.waiting = (key, future)
        self._check(key)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await future
        self.waiting = None
        times = self.receipts.pop(key, [])
        return {"times": times, "missing": max(0, len(self.live) - len(times))}

    def drop(self) -> dict[str, Any]:
        for client in self.live:
            client.close()
        self.live.clear()
        return {"live": 0}

    def stats(self) -> dict[str, Any]:
        lost = dict(self.lost_reasons)
        return {"live": len(self.live), "lost": lost, "other_frames": self.other_frames}


async def serve_clients() -> None:
    """Commands on stdin, one JSON line each; one JSON line back on stdout for each."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    fleet = Fleet()
    while line := await reader.readline():
        command = json.loads(line)
        op = command["op"]
        if op == "open":
            reply = await fleet.open(command["url"], command["count"], command["token"])
        elif op == "collect":
            reply = await fleet.collect(command["id"], command["timeout"])
        elif op == "drop":
            reply = fleet.drop()
        else:
            reply = fleet.stats()
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def run_clients() -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve_clients())
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_clients())


# --- the floor: a plain Starlette broadcast ------------------------------------------------------


def run_floor(port: int) -> None:
    """uvicorn with `outlive api`'s own options, serving `floor_app`."""
    import uvicorn

    from outlive.serving import uvicorn_config

    app = floor_app(os.environ["REDIS_URL"], FLOOR_PREFIX)
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", port)).run()


def floor_app(redis_url: str, prefix: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    sockets: set[WebSocket] = set()

    async def endpoint(websocket: WebSocket) -> None:
        await websocket.accept(subprotocol="graphql-transport-ws")
        sockets.add(websocket)
        try:
            await websocket.send_text('{"type":"connection_ack"}')
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass
        finally:
            sockets.discard(websocket)

    async def broadcast(data: bytes) -> None:
        frame = FRAME_HEAD + data.decode() + "}}}"
        for websocket in list(sockets):
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await websocket.send_text(frame)

    async def listen(pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=30)
            if message is not None and message["type"] == "pmessage":
                await broadcast(message["data"])

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        redis = create_redis(redis_url)
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.psubscribe(f"{prefix}*")
        task = asyncio.create_task(listen(pubsub))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
            await redis.aclose()

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    routes = [Route("/healthz", healthz), WebSocketRoute("/graphql", endpoint)]
    return Starlette(routes=routes, lifespan=lifespan)


# --- the bench -----------------------------------------------------------------------------------


@dataclass
class Target:
    """One server (Outlive or the floor), its client process and how a nudge reaches it."""

    name: str
    pid: int
    url: str
    token: str | None
    clients: Child
    publisher: Publisher
    base_kib: int = 0
    latencies: list[float] = field(default_factory=list)
    lasts: list[float] = field(default_factory=list)
    missing: int = 0

    async def grow(self, count: int) -> None:
        """Open sockets until `count` are live; every one must open."""
        live = (await self.clients.call(op="stats"))["live"]
        reply = await self.clients.call(
            op="open", url=self.url, count=count - live, token=self.token
        )
        if reply["errors"] or reply["live"] != count:
            raise RuntimeError(f"{self.name}: {reply['live']} of {count} sockets open: {reply}")

    async def fan_out(self, tenant_id: uuid.UUID, *, record: bool) -> None:
        nudge = Nudge("run.updated", tenant_id, datetime.now(UTC), uuid.uuid4())
        began = time.monotonic()
        await self.publisher.send([nudge])
        if self.publisher.failures:
            raise RuntimeError(f"{self.name}: the publish failed")
        reply = await self.clients.call(op="collect", id=str(nudge.id), timeout=ROUND_TIMEOUT_S)
        if record:
            times = reply["times"]
            self.latencies.extend(t - began for t in times)
            if times:
                self.lasts.append(max(times) - began)
            self.missing += reply["missing"]

    def reset(self) -> None:
        self.latencies, self.lasts, self.missing = [], [], 0

    def per_socket_kib(self, count: int) -> float:
        return (rss_kib(self.pid) - self.base_kib) / count


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def raise_open_files(needed: int) -> None:
    """Children inherit it: each server and each client process holds `needed` sockets."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard != resource.RLIM_INFINITY and hard < needed + 1024:
        raise SystemExit(f"the open-files hard limit ({hard}) is too low for {needed} sockets")


async def make_tenant(env: Env) -> tuple[uuid.UUID, str]:
    done = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "outlive.cli", "token", "create", "--tenant", "bench", "--email", "b@bench.test"),
        env={**os.environ, **env.vars()},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await done.communicate()
    if done.returncode:
        raise RuntimeError("outlive token create failed")
    conn = await asyncpg.connect(env.database_url)
    tenant_id = await conn.fetchval("SELECT id FROM tenants WHERE slug = 'bench'")
    await conn.close()
    return tenant_id, out.decode().strip().splitlines()[-1]


async def warm_up(target: Target, tenant_id: uuid.UUID) -> None:
    """Open, use and close a few sockets (pools, caches, first-use imports), then the baseline."""
    await target.grow(WARM_SOCKETS)
    for _ in range(2):
        await target.fan_out(tenant_id, record=False)
    await target.clients.call(op="drop")
    await asyncio.sleep(1)
    target.base_kib = rss_kib(target.pid)


async def measure(
    targets: list[Target], tenant_id: uuid.UUID, size: int, nudges: int, *, verbose: bool
) -> list[Any]:
    for target in targets:
        target.reset()
        await target.grow(size)
    await asyncio.sleep(1)
    kib = [t.per_socket_kib(size) for t in targets]
    for i in range(WARM_ROUNDS + nudges):
        for target in targets:  # alternate, so both see the same machine weather
            await target.fan_out(tenant_id, record=i >= WARM_ROUNDS)
    if verbose:
        for t in targets:
            print(f"{size} {t.name} last ms:", " ".join(f"{x * 1000:.0f}" for x in t.lasts))
    api, floor = (Figures(t.name, t.latencies, 1.0) for t in targets)
    return [
        size,
        f"{kib[0]:.1f}",
        f"{kib[1]:.1f}",
        f"{api.p50_ms:.1f}",
        f"{api.p99_ms:.1f}",
        f"{floor.p50_ms:.1f}",
        f"{floor.p99_ms:.1f}",
        f"{api.p99_ms / floor.p99_ms:.2f}x",
        f"{statistics.median(targets[0].lasts) * 1000:.1f}",
        f"{statistics.median(targets[1].lasts) * 1000:.1f}",
        f"{targets[0].missing}/{targets[1].missing}",
    ]


HEADER = [
    "subscribers",
    "KiB/sub",
    "floor KiB/sub",
    "p50 ms",
    "p99 ms",
    "floor p50",
    "floor p99",
    "p99 ratio",
    "last p50",
    "floor last p50",
    "missing",
]


async def run(sizes: list[int], nudges: int, logs: Path, *, verbose: bool) -> list[list[Any]]:
    async with bench_env() as env, contextlib.AsyncExitStack() as stack:
        tenant_id, token = await make_tenant(env)
        redis: Redis = create_redis(env.redis_url)
        stack.push_async_callback(redis.aclose)
        api_port, floor_port = free_port(), free_port()
        # Thousands of sockets of one tenant on one process: past the production defaults.
        limits = env.vars(
            OUTLIVE_WS_MAX_PER_TENANT="1000000",
            OUTLIVE_API_LIMIT_CONCURRENCY="0",
            OUTLIVE_WS_MAX_SOCKETS="0",
        )
        api = stack.enter_context(
            outlive("api", "--port", str(api_port), env=limits, log=logs / "api.log")
        )
        floor_argv = [sys.executable, __file__, "--floor", str(floor_port)]
        floor = stack.enter_context(spawn(floor_argv, env=limits, log=logs / "floor.log"))
        api_url, floor_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{floor_port}"
        await wait_http(f"{api_url}/healthz")
        await wait_http(f"{floor_url}/healthz")
        targets = [
            Target(
                "outlive",
                api.pid,
                api_url,
                token,
                await stack.enter_async_context(Child.running(__file__, "--clients")),
                Publisher(redis, prefix=channel_prefix(env.redis_url)),
            ),
            Target(
                "floor",
                floor.pid,
                floor_url,
                None,
                await stack.enter_async_context(Child.running(__file__, "--clients")),
                Publisher(redis, prefix=FLOOR_PREFIX),
            ),
        ]
        for target in targets:
            await warm_up(target, tenant_id)
        rows = [await measure(targets, tenant_id, size, nudges, verbose=verbose) for size in sizes]
        for target in targets:
            stats = await target.clients.call(op="stats")
            if stats["lost"] or stats["other_frames"]:
                print(f"{target.name}: sockets lost {stats['lost']}, other frames", end=" ")
                print(stats["other_frames"])
        return rows


def log_trouble(path: Path) -> list[str]:
    """The log's warnings, errors and tracebacks (uvicorn's per-socket INFO lines aside)."""
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    return [line for line in lines if any(w in line for w in ("WARNING", "ERROR", "Traceback"))]


def verdict(rows: list[list[Any]]) -> list[str]:
    worst_kib = max(float(r[1]) for r in rows)
    lines = [
        f"memory: at most {worst_kib:.1f} KiB per subscriber "
        f"({'ok' if worst_kib <= TARGET_KIB else 'OVER'}: target <= {TARGET_KIB:.0f})"
    ]
    for row in rows:
        if row[0] == TARGET_SIZE:
            ratio = float(row[7].rstrip("x"))
            ok = "ok" if ratio <= TARGET_RATIO else "OVER"
            lines.append(
                f"p99 at {TARGET_SIZE}: {ratio:.2f}x the floor's ({ok}: target <= {TARGET_RATIO}x)"
            )
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,10000", help="subscriber counts, ascending")
    parser.add_argument("--nudges", type=int, default=30, help="counted nudges per size and server")
    parser.add_argument("--verbose", action="store_true", help="print each round's fan-out time")
    parser.add_argument("--clients", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    raise_open_files(sizes[-1])
    with tempfile.TemporaryDirectory(prefix="outlive-bench-") as tmp:
        logs = Path(tmp)
        try:
            rows = await run(sizes, args.nudges, logs, verbose=args.verbose)
        finally:
            for name in ("api", "floor"):
                trouble = log_trouble(logs / f"{name}.log")
                if trouble:
                    print(f"{name} log: {len(trouble)} warning/error line(s), first ones:")
                    print("\n".join(f"  {line}" for line in trouble[:10]))
    print(
        "nudge fan-out to idle subscribers of one tenant: `outlive api` vs the floor "
        "(plain Starlette broadcast of the same frame)"
    )
    print(
        f"latency: publish -> client receipt over every (nudge, socket), {args.nudges} nudges per "
        "size; last = whole fan-out; memory: server RSS growth / subscribers"
    )
    print(table(rows, HEADER))
    print("\n".join(verdict(rows)))


if __name__ == "__main__":
    if "--clients" in sys.argv:
        run_clients()
    elif "--floor" in sys.argv:
        run_floor(int(sys.argv[sys.argv.index("--floor") + 1]))
    else:
        asyncio.run(main())
