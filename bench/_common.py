"""Shared pieces of the benchmarks: a database and Redis db of their own, processes, figures."""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from redis.asyncio import Redis
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import redis_claims  # noqa: E402  (one claim protocol for test runs and benches)

ADMIN_PG = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
BASE_REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
# A bench claims a Redis db index the way a test run does (`tests/conftest.py`: a key per index
# in db 0), from the top down, so a bench never flushes a test run's index, nor another bench's.
REDIS_CLAIMS = range(15, 0, -1)


@dataclass
class Env:
    database_url: str
    redis_url: str

    def vars(self, **extra: str) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url, **extra}


def compile_project() -> None:
    """Outlive's own modules compiled to bytecode, as an installed wheel's are (`uv sync`
    compiles the installed packages, not the project it installs editable). Where nothing may
    write `__pycache__` (PYTHONDONTWRITEBYTECODE=1), every process a bench starts compiled its
    265 modules from source instead: 0.15 to 0.2 s of each start, which no deployment pays
    (docs/operating.md#bytecode)."""
    compileall.compile_dir(ROOT / "src" / "outlive", quiet=1)


@contextlib.asynccontextmanager
async def bench_env() -> AsyncIterator[Env]:
    """A fresh migrated database and an emptied Redis db index, removed afterwards; the project
    compiled (`compile_project`)."""
    compile_project()
    name = f"outlive_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(ADMIN_PG)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(ADMIN_PG).set(database=name).render_as_string(hide_password=False)
    index = await _claim_redis_index(name)
    redis_url = f"{BASE_REDIS.rstrip('/')}/{index}"
    redis = Redis.from_url(redis_url)
    await redis.flushdb()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "outlive.cli", "migrate"],
            env={**os.environ, "DATABASE_URL": url},
            capture_output=True,
            check=False,
        )
        if done.returncode:
            raise RuntimeError(done.stderr.decode())
        yield Env(database_url=url, redis_url=redis_url)
    finally:
        await redis.flushdb()
        await redis.aclose()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
        if not os.environ.get("BENCH_REDIS_DB"):  # the claim was ours
            await redis_claims.release(f"{BASE_REDIS.rstrip('/')}/0", index)


async def _claim_redis_index(owner: str) -> int:
    """A Redis db index nobody else (a test run, another bench) holds; `BENCH_REDIS_DB` forces
    one."""
    forced = os.environ.get("BENCH_REDIS_DB")
    if forced:
        return int(forced)
    index: int = await redis_claims.claim(f"{BASE_REDIS.rstrip('/')}/0", owner, REDIS_CLAIMS)
    return index


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def outlive(
    *args: str, env: dict[str, str], log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with spawn([sys.executable, "-m", "outlive.cli", *args], env=env, log=log) as process:
        yield process


@contextlib.contextmanager
def spawn(
    argv: Sequence[str], *, env: dict[str, str], log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (its output to `log`, or dropped), stopped with SIGTERM on the way out."""
    out = open(log if log is not None else os.devnull, "wb")  # noqa: SIM115
    process = subprocess.Popen(list(argv), env={**os.environ, **env}, stdout=out, stderr=out)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        out.close()


async def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} never answered")
            await asyncio.sleep(0.1)


@dataclass
class Figures:
    label: str
    latencies: list[float]
    elapsed: float
    due: list[float] = field(default_factory=list)  # `paced`: when each call was due (s in)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000

    @property
    def per_s(self) -> float:
        return len(self.latencies) / self.elapsed


class KeepAlive:
    """A minimal HTTP/1.1 keep-alive client for load: one connection per lane, requests written
    as prepared bytes. httpx costs about a millisecond of CPU per request, on the same two cores
    as the server it measures; this costs next to nothing, so the figures are the server's."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post_json(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return await self.send(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{head}\r\n".encode()
            + body
        )

    async def get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return await self.send(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n{head}\r\n".encode())

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """One request (its bytes as written); the status and the body of the answer. An idle
        connection the server closed meanwhile (uvicorn's keep-alive timeout) is replaced."""
        while self._idle:
            reader, writer = self._idle.pop()
            if reader.at_eof():
                writer.close()
                continue
            try:
                return await self._exchange(reader, writer, request)
            except (OSError, asyncio.IncompleteReadError):
                writer.close()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        return await self._exchange(reader, writer, request)

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
    ) -> tuple[int, bytes]:
        writer.write(request)
        status_line, _, rest = (await reader.readuntil(b"\r\n\r\n")).partition(b"\r\n")
        length = None
        for line in rest.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError("the server sent no Content-Length")
        payload = await reader.readexactly(length)
        self._idle.append((reader, writer))
        return int(status_line.split()[1]), payload

    async def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


async def load(label: str, call: object, count: int, concurrency: int) -> Figures:
    """Run `call(i)` `count` times with `concurrency` in flight; per-call latencies."""
    latencies: list[float] = []
    next_index = 0

    async def lane() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            began = time.perf_counter()
            await call(i)  # type: ignore[operator]
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return Figures(label, latencies, time.perf_counter() - began)


async def paced(
    label: str,
    call: object,
    rate: float,
    *,
    count: int | None = None,
    until: asyncio.Future[Any] | None = None,
) -> Figures:
    """Start `call(i)` `rate` times a second, whatever the answers' pace (an open loop, as
    independent clients are), `count` times or until the future `until` is done; each call's
    latency from when it was due, so a late start counts against the system (no coordinated
    omission)."""
    latencies: list[float] = []
    dues: list[float] = []
    running: set[asyncio.Task[None]] = set()

    async def one(i: int, due: float) -> None:
        await call(i)  # type: ignore[operator]
        latencies.append(time.perf_counter() - due)
        dues.append(due - began)

    began, i = time.perf_counter(), 0
    while (count is None or i < count) and not (until is not None and until.done()):
        due = began + i / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        task = asyncio.create_task(one(i, due))
        running.add(task)
        task.add_done_callback(running.discard)
        i += 1
    await asyncio.gather(*running)
    return Figures(label, latencies, time.perf_counter() - began, dues)


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Child:
    """A process of a bench's own (the bench's file run again with a flag, such as `--clients`),
    driven by one JSON command per line on its stdin and answering one JSON line on its stdout."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, script: str, flag: str) -> AsyncIterator[Child]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            script,
            flag,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 26,
        )
        try:
            yield cls(process, f"{Path(script).name} {flag}")
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()

    async def call(self, **command: Any) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:
            raise RuntimeError(f"{self.name} has no pipes")
        stdin.write(json.dumps(command).encode() + b"\n")
        await stdin.drain()
        line = await stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited ({self.process.returncode})")
        reply: dict[str, Any] = json.loads(line)
        return reply
