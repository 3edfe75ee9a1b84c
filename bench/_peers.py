"""What every system of `bench/peers.py` shares: the adapter's interface (`System`), the
server CPU meter, the finished workflows' figures, a database of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from _common import ADMIN_PG
from sqlalchemy.engine import make_url

HERE = Path(__file__).resolve().parent
CONCURRENCY = 32
CRASH = {"workflows": 20, "steps": 10, "delay_ms": 300}


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def _cpu_s(pid: str) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_cpu_s(database: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving `database` (by its process title)."""
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if title.startswith("postgres: ") and f" {database} " in title:
            seconds = _cpu_s(entry)
            if seconds is not None:
                found[int(entry)] = seconds
    return found


def process_cpu_s(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds of each of these processes (a server that is not PostgreSQL)."""
    return {pid: s for pid in pids if (s := _cpu_s(str(pid))) is not None}


def tree_cpu_s(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds of each of these processes and of every descendant (a worker that forks its
    own workers is counted whole)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, PermissionError):
                stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
                parents[int(entry)] = int(stat[1])
    tree, grew = set(pids), True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return {pid: s for pid in tree if (s := _cpu_s(str(pid))) is not None}


class CpuMeter:
    """The server CPU that `sample`'s processes used between `start` and `stop`, sampled every
    0.5 s so that a process that ends meanwhile still counts up to its last sample."""

    def __init__(self, sample: Callable[[], dict[int, float]]) -> None:
        self.sample = sample
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CpuMeter:
        self._first = self.sample()
        self._last = dict(self._first)
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._last.update(self.sample())

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._last.update(self.sample())

    @property
    def seconds(self) -> float:
        return sum(v - self._first.get(pid, 0.0) for pid, v in self._last.items())


@dataclass
class Done:
    id: str
    submitted: float  # epoch seconds
    done: float
    output: Any = None


@dataclass
class System:
    """One system's adapter: its workers, how to submit the work and read back what it recorded."""

    name: str
    database: str
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    async def open(self) -> None:
        """Ready to take work (connections, a schema, a server)."""

    def settings_text(self) -> str:
        raise NotImplementedError

    def cpu(self) -> CpuMeter:
        """The server CPU of this system's work: its PostgreSQL backends by default."""
        return CpuMeter(lambda: backend_cpu_s(self.database))

    def start_worker(self, log: Path) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    async def started(self, log: Path) -> None:
        raise NotImplementedError

    async def submit(self, count: int, payload: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    async def finished(self, ids: list[str], timeout: float) -> list[Done]:
        raise NotImplementedError

    async def steps_done(self, ids: list[str]) -> dict[str, int]:
        raise NotImplementedError

    async def step_times(self, workflow: str) -> list[float]:
        raise NotImplementedError

    async def holder_of_most(self, ids: list[str]) -> int:
        """Which worker (index) holds the most of these workflows."""
        raise NotImplementedError

    async def wake_times(self, ids: list[str]) -> dict[str, float]:
        """When each workflow's durable sleep was due, as the system recorded it (epoch s)."""
        raise NotImplementedError

    def restart(self, victim: int, log: Path) -> None:
        self.start_worker(log)

    async def close(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.kill()
            process.wait()


def worker_process(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Any:
    with log.open("ab") as out:
        return subprocess.Popen(list(args), env=env, stdout=out, stderr=subprocess.STDOUT)


async def wait_log(log: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in await asyncio.to_thread(log.read_text, errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{log.name} never said {text!r}")
        await asyncio.sleep(0.05)


async def poll_until_all(
    name: str, count: int, timeout: float, read: Callable[[], Any]
) -> list[Any]:
    """`await read()` every 50 ms until it returns `count` rows (the finished workflows)."""
    deadline = time.monotonic() + timeout
    while True:
        rows: list[Any] = await read()
        if len(rows) >= count:
            return rows
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: {len(rows)} of {count} done in {timeout}s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def fresh_database(prefix: str) -> AsyncIterator[str]:
    """A database of its own on the bench's server, dropped afterwards."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(ADMIN_PG)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(ADMIN_PG).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def tcp_sockets(local_port: int | None = None) -> list[tuple[int, int, str, str]]:
    """(local port, remote port, state in hex, inode) of every TCP socket, from /proc."""
    found = []
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table_path).read_text().splitlines()[1:]:
            parts = line.split()
            local = int(parts[1].rsplit(":", 1)[1], 16)
            if local_port is None or local == local_port:
                remote = int(parts[2].rsplit(":", 1)[1], 16)
                found.append((local, remote, parts[3], parts[9]))
    return found
