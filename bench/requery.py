"""Benchmark: a nudge to K viewers, each re-querying the SPA's `Runs`, beside a hand-written floor.

    uv run python bench/requery.py [--sizes 100,400,1000] [--events 20]

K viewers of one tenant, each with a nudge subscription (graphql-transport-ws) and a keep-alive
HTTP connection of its own, re-query the SPA's `Runs` query (first 20, the `RunFields` fragment,
`__typename`s as Apollo sends them; a GET with the persisted query's hash, as the SPA sends it) on
every nudge, coalescing bursts the way the SPA does (never two requests in flight: a nudge during
one marks it dirty; no more than one request per 50 ms). A `startRun` is made; "fresh" is the time
from just before it is sent until each viewer holds a list that shows the new run (CLOCK_MONOTONIC
is one clock for every process), over every (event, viewer).

The floor, measured in the same run (`bench/_floor.py`), is plain Starlette + asyncpg doing the
same work: `POST /start` (token lookup, the INSERT, a publish on Redis), a raw WebSocket broadcast
of the nudge, and `GET /runs` (token lookup, SELECT of 20 rows, the same JSON). Both servers run
with `outlive api`'s uvicorn options and have a client process of their own.

Per event, also: the server process's CPU time (user + system, /proc), the executions (distinct
`outlive-execution` answers; for the floor, every request is one), and PostgreSQL statements
(`pg_stat_database` transactions of the bench database over 5 more events per server, read from
another database once the counters settled; every statement here is its own transaction; the
bench's own reset is taken off). Events run in blocks that alternate between the two servers.

Targets (the issue, on this 2-core machine): p99 at 400 viewers at most 1.0x the floor's; server
CPU per event at most 1.5x the floor's; executions per event independent of the viewers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlsplit

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ADMIN_PG,
    Child,
    Env,
    KeepAlive,
    bench_env,
    free_port,
    outlive,
    spawn,
    table,
    wait_http,
)
from nudges import HANDSHAKE, PING, PONG, TEXT, client_frame, raise_open_files, rss_kib

RUN_FIELDS = (
    "fragment RunFields on Run { id agent status attempt input output error createdAt startedAt"
    " finishedAt cancelRequestedAt __typename }"
)
QUERY = (
    "query Runs($first: Int!, $after: String, $status: [RunStatus!]) {"
    " runs(first: $first, after: $after, status: $status) { edges { cursor node { ...RunFields"
    " __typename } __typename } pageInfo { hasNextPage endCursor __typename } __typename } }\n"
    + RUN_FIELDS
)
VARIABLES = {"first": 20, "after": None, "status": None}
HASH = hashlib.sha256(QUERY.encode()).hexdigest()
START = "mutation($input: StartRunInput!) { startRun(input: $input) { created run { id } } }"
NUDGES = "subscription { nudges { type tenantId at id } }"
BURST_MS = 50
TIMEOUT_S = 60.0
STATS_FLUSH_S = 10.5


# --- the client process: K viewers of one server --------------------------------------------------


def runs_request(base: str, token: str, floor: bool) -> bytes:
    host = urlsplit(base).netloc
    if floor:
        path = "/runs?first=20"
    else:
        extensions = {"persistedQuery": {"version": 1, "sha256Hash": HASH}}
        path = (
            f"/graphql?operationName=Runs&variables={quote(json.dumps(VARIABLES))}"
            f"&extensions={quote(json.dumps(extensions))}"
        )
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n"
    ).encode()


class Viewer(asyncio.Protocol):
    """One viewer: its socket (this protocol) and its keep-alive HTTP connection."""

    def __init__(self, fleet: Fleet, request: bytes, token: str | None, host: str) -> None:
        self.fleet, self.request, self.token, self.host = fleet, request, token, host
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.http: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.in_flight = self.dirty = False
        self.last_start = 0.0
        self.newest: str | None = None
        self.seen: dict[str, float] = {}

    # the socket
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        key = "dGhlIHNhbXBsZSBub25jZQ=="
        self.transport.write(HANDSHAKE.format(host=self.host, key=key).encode())

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.upgraded:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            del self.buffer[: end + 4]
            self.upgraded = True
            if self.token is not None:
                init = {"type": "connection_init", "payload": {"authorization": self.token}}
                self.send(init)
        while len(self.buffer) >= 2:
            length, start = self.buffer[1] & 0x7F, 2
            if length == 126:
                length, start = int.from_bytes(self.buffer[2:4], "big"), 4
            if len(self.buffer) < start + length:
                return
            opcode, payload = self.buffer[0] & 0x0F, bytes(self.buffer[start : start + length])
            del self.buffer[: start + length]
            if opcode == PING and self.transport is not None:
                self.transport.write(client_frame(PONG, payload))
            elif opcode == TEXT:
                self.on_message(payload)

    def on_message(self, payload: bytes) -> None:
        if b'"type":"next"' in payload:
            self.nudged()
        elif b"connection_ack" in payload and self.token is not None:
            self.send({"type": "subscribe", "id": "1", "payload": {"query": NUDGES}})
            self.send({"type": "ping"})
        elif (b"connection_ack" in payload or b'"pong"' in payload) and not self.ready.done():
            self.ready.set_result(None)

    def send(self, message: dict[str, Any]) -> None:
        if self.transport is not None:
            self.transport.write(client_frame(TEXT, json.dumps(message).encode()))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"socket lost: {exc!r}"))

    # the re-query, coalesced like the SPA's
    def nudged(self) -> None:
        if self.in_flight:
            self.dirty = True
            return
        self.in_flight = True
        wait = self.last_start + BURST_MS / 1000 - time.monotonic()
        asyncio.get_running_loop().call_later(max(0.0, wait), self._fetch)

    def _fetch(self) -> None:
        task = asyncio.ensure_future(self.fetch())
        self.fleet.tasks.add(task)
        task.add_done_callback(self.fleet.tasks.discard)

    async def ask(self, redial: bool = False) -> tuple[bytes, bytes]:
        if self.http is None:
            raise RuntimeError("the viewer has no HTTP connection")
        if redial or self.http[0].at_eof():
            self.http[1].close()
            self.http = await asyncio.open_connection(*self.address)
        reader, writer = self.http
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head, await reader.readexactly(length)

    async def fetch(self) -> None:
        while True:
            self.dirty = False
            self.last_start = time.monotonic()
            try:
                head, body = await self.ask()
            except (OSError, asyncio.IncompleteReadError):
                # the server closed it while it idled (uvicorn's keep-alive timeout): redial
                head, body = await self.ask(redial=True)
            now = time.monotonic()
            execution = None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"outlive-execution":
                    execution = value.strip()
            self.fleet.requests += 1
            if execution is not None:
                self.fleet.executions.add(execution)
            at = body.find(b'"id":"')
            newest = body[at + 6 : at + 42].decode() if at >= 0 else None
            if newest is not None and newest not in self.seen:
                self.seen[newest] = now
            if not self.dirty:
                break
        self.in_flight = False
        self.fleet.check()


@dataclass
class Fleet:
    viewers: list[Viewer] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    requests: int = 0
    executions: set[bytes] = field(default_factory=set)
    waiting: tuple[str, asyncio.Future[None]] | None = None

    def check(self) -> None:
        if self.waiting is None or self.waiting[1].done():
            return
        run_id = self.waiting[0]
        if all(run_id in v.seen and not v.in_flight for v in self.viewers):
            self.waiting[1].set_result(None)

    async def open(self, base: str, count: int, token: str, floor: bool) -> dict[str, Any]:
        parts = urlsplit(base)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        request = runs_request(base, token, floor)
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(100)

        async def one() -> None:
            async with gate:
                _, viewer = await loop.create_connection(
                    lambda: Viewer(
                        self, request, None if floor else f"Bearer {token}", parts.netloc
                    ),
                    host,
                    port,
                )
                viewer.address = (host, port)
                viewer.http = await asyncio.open_connection(host, port)
                async with asyncio.timeout(30):
                    await viewer.ready
                self.viewers.append(viewer)

        await asyncio.gather(*(one() for _ in range(count - len(self.viewers))))
        return {"live": len(self.viewers)}

    async def collect(self, run_id: str, timeout: float) -> dict[str, Any]:
        future = asyncio.get_running_loop().create_future()
        self.waiting = (run_id, future)
        self.check()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await future
        self.waiting = None
        times = [v.seen[run_id] for v in self.viewers if run_id in v.seen]
        reply = {
            "times": times,
            "missing": len(self.viewers) - len(times),
            "requests": self.requests,
            "executions": len(self.executions),
        }
        self.requests = 0
        self.executions.clear()
        for v in self.viewers:
            v.seen.clear()
        return reply


async def serve_clients() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    fleet = Fleet()
    while line := await reader.readline():
        command = json.loads(line)
        if command["op"] == "open":
            reply = await fleet.open(
                command["url"], command["count"], command["token"], command["floor"]
            )
        else:
            reply = await fleet.collect(command["id"], command["timeout"])
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def run_clients() -> None:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve_clients())


# --- the bench -----------------------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Target:
    name: str
    pid: int
    url: str
    token: str
    floor: bool
    clients: Child
    writer: KeepAlive
    fresh: list[float] = field(default_factory=list)
    cpu: float = 0.0
    events: int = 0
    executions: int = 0
    requests: int = 0
    statements: int = 0
    missing: int = 0

    async def event(self, reset: asyncpg.Connection, *, record: bool) -> None:
        await self.writer.close()  # a new connection: one that idled may have been closed
        began = time.monotonic()
        auth = {"Authorization": f"Bearer {self.token}"}
        if self.floor:
            status, payload = await self.writer.post_json("/start", b'{"turns": 1}', auth)
            run_id = json.loads(payload)["id"]
        else:
            body = {"query": START, "variables": {"input": {"agent": "demo", "input": {}}}}
            status, payload = await self.writer.post_json(
                "/graphql", json.dumps(body).encode(), auth
            )
            run_id = json.loads(payload)["data"]["startRun"]["run"]["id"]
        if status != 200:
            raise RuntimeError(f"{self.name}: the write answered {status}: {payload!r}")
        reply = await self.clients.call(op="collect", id=run_id, timeout=TIMEOUT_S)
        await reset.execute("UPDATE runs SET status = 'CANCELLED' WHERE id = $1", uuid.UUID(run_id))
        if record:
            self.fresh.extend(t - began for t in reply["times"])
            self.missing += reply["missing"]
            self.requests += reply["requests"]
            self.executions += reply["executions"] if not self.floor else reply["requests"]
            self.events += 1

    def reset(self) -> None:
        self.fresh, self.cpu, self.events = [], 0.0, 0
        self.executions = self.requests = self.statements = self.missing = 0


async def transactions(admin: asyncpg.Connection, database: str) -> int:
    """The bench database's committed + rolled-back transactions, once the counters settle
    (PostgreSQL 15 flushes an idle backend's counters at most once a second, else within 10 s)."""
    await asyncio.sleep(STATS_FLUSH_S)
    last, stable_since = -1, time.monotonic()
    while True:
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        now = await admin.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", database
        )
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since > 1.6:
            return int(now)
        await asyncio.sleep(0.2)


async def block(target: Target, reset: asyncpg.Connection, n: int) -> None:
    """`n` recorded events: their latencies, and the server's CPU time."""
    await target.event(reset, record=False)  # connections that idled out are opened again
    before_cpu = cpu_s(target.pid)
    for _ in range(n):
        await target.event(reset, record=True)
    target.cpu += cpu_s(target.pid) - before_cpu


async def count_statements(
    target: Target, reset: asyncpg.Connection, admin: asyncpg.Connection, database: str, n: int
) -> None:
    """`n` events between two settled readings of PostgreSQL's transaction counters (apart from
    the latency blocks: settling takes seconds, and idle keep-alive connections time out)."""
    before = await transactions(admin, database)
    for _ in range(n):
        await target.event(reset, record=False)
    target.statements = (await transactions(admin, database) - before - n) // n  # minus resets


async def seed(env: Env) -> tuple[uuid.UUID, str]:
    done = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "outlive.cli", "token", "create", "--tenant", "bench", "--email", "b@bench.test"),
        env={**os.environ, **env.vars()},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await done.communicate()
    conn = await asyncpg.connect(env.database_url)
    tenant_id = await conn.fetchval("SELECT id FROM tenants WHERE slug = 'bench'")
    await conn.execute(  # a full first page, as a tenant in use has
        "INSERT INTO runs (tenant_id, agent, input, status, output)"
        " SELECT $1, 'demo', '{\"turns\": 1}'::jsonb, 'SUCCEEDED', '{\"turns\": 1}'::jsonb"
        " FROM generate_series(1, 40)",
        tenant_id,
    )
    await conn.close()
    return tenant_id, out.decode().strip().splitlines()[-1]


async def register(url: str, token: str) -> None:
    import httpx

    extensions = {"persistedQuery": {"version": 1, "sha256Hash": HASH}}
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{url}/graphql",
            json={"query": QUERY, "variables": VARIABLES, "extensions": extensions},
            headers={"Authorization": f"Bearer {token}"},
        )
        if answer.status_code != 200 or "errors" in answer.json():
            raise RuntimeError(answer.text)


def row(size: int, api: Target, floor: Target) -> list[object]:
    def p(t: Target, q: float) -> float:
        ordered = sorted(t.fresh)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000

    cpu_api, cpu_floor = api.cpu / api.events * 1000, floor.cpu / floor.events * 1000
    return [
        size,
        f"{statistics.median(api.fresh) * 1000:.0f}",
        f"{statistics.median(floor.fresh) * 1000:.0f}",
        f"{p(api, 0.99):.0f}",
        f"{p(floor, 0.99):.0f}",
        f"{p(api, 0.99) / p(floor, 0.99):.2f}x",
        f"{cpu_api:.0f}",
        f"{cpu_floor:.0f}",
        f"{cpu_api / cpu_floor:.2f}x",
        f"{api.executions / api.events:.1f}",
        f"{floor.executions / floor.events:.0f}",
        api.statements,
        floor.statements,
        f"{api.missing}/{floor.missing}",
    ]


HEADER = [
    "viewers",
    "fresh p50",
    "floor p50",
    "fresh p99",
    "floor p99",
    "p99 ratio",
    "CPU ms/event",
    "floor CPU",
    "CPU ratio",
    "execs/event",
    "floor execs",
    "PG stmts/event",
    "floor stmts",
    "missing",
]


async def run(sizes: list[int], events: int, logs: Path) -> list[list[object]]:
    async with bench_env() as env, contextlib.AsyncExitStack() as stack:
        _, token = await seed(env)
        api_port, floor_port = free_port(), free_port()
        api = stack.enter_context(
            outlive("api", "--port", str(api_port), env=env.vars(), log=logs / "api.log")
        )
        floor_argv = [sys.executable, str(Path(__file__).parent / "_floor.py"), str(floor_port)]
        floor = stack.enter_context(spawn(floor_argv, env=env.vars(), log=logs / "floor.log"))
        urls = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{floor_port}"
        for url in urls:
            await wait_http(f"{url}/healthz")
        await register(urls[0], token)
        targets = []
        for name, process, url, is_floor in (
            ("outlive", api, urls[0], False),
            ("floor", floor, urls[1], True),
        ):
            clients = await stack.enter_async_context(Child.running(__file__, "--clients"))
            writer = KeepAlive("127.0.0.1", urlsplit(url).port or 80)
            targets.append(Target(name, process.pid, url, token, is_floor, clients, writer))
        reset = await asyncpg.connect(env.database_url)
        admin = await asyncpg.connect(ADMIN_PG)
        stack.push_async_callback(reset.close)
        stack.push_async_callback(admin.close)
        database = env.database_url.rsplit("/", 1)[1]
        rows = []
        for size in sizes:
            for t in targets:
                await t.clients.call(op="open", url=t.url, count=size, token=token, floor=t.floor)
                for _ in range(3):
                    await t.event(reset, record=False)
                t.reset()
            for _ in range(2):  # blocks alternate, so both see the same machine weather
                for t in targets:
                    await block(t, reset, events // 2)
            for t in targets:
                await count_statements(t, reset, admin, database, 5)
            rows.append(row(size, targets[0], targets[1]))
            print(f"{size} viewers ({rss_kib(api.pid) // 1024} MiB API RSS):", rows[-1])
        return rows


def verdict(rows: list[list[object]]) -> list[str]:
    lines = []
    for r in rows:
        if r[0] == 400:
            p99 = float(str(r[5]).rstrip("x"))
            ok = "ok" if p99 <= 1.0 else "OVER"
            lines.append(f"p99 at 400: {p99:.2f}x the floor's ({ok}: target <= 1.0x)")
    cpu = max(float(str(r[8]).rstrip("x")) for r in rows)
    ok = "ok" if cpu <= 1.5 else "OVER"
    lines.append(f"CPU per event: at most {cpu:.2f}x the floor's ({ok}: target <= 1.5x)")
    execs = [float(str(r[9])) for r in rows]
    sizes = " / ".join(str(r[0]) for r in rows)
    lines.append(f"executions per event: {' / '.join(f'{e:.1f}' for e in execs)} at {sizes}")
    return lines


async def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,400,1000", help="viewer counts, ascending")
    parser.add_argument("--events", type=int, default=20, help="counted events per size and server")
    parser.add_argument("--clients", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    raise_open_files(2 * sizes[-1])
    with tempfile.TemporaryDirectory(prefix="outlive-bench-") as tmp:
        rows = await run(sizes, args.events, Path(tmp))
        for name in ("api", "floor"):
            text = (Path(tmp) / f"{name}.log").read_text(errors="replace")
            trouble = [line for line in text.splitlines() if "ERROR" in line or "Traceback" in line]
            if trouble:
                print(f"{name} log: {len(trouble)} error line(s), first: {trouble[0]}")
    print("K viewers re-query `Runs` on a nudge: `outlive api` vs the floor (Starlette + asyncpg)")
    print(f"fresh: startRun sent -> the viewer's list shows the run, ms; {args.events} events")
    print(table(rows, HEADER))
    print("\n".join(verdict(rows)))


if __name__ == "__main__":
    if "--clients" in sys.argv:
        run_clients()
    else:
        asyncio.run(main())
