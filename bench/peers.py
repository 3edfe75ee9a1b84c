"""Benchmark: Outlive and DBOS Transact side by side, on the same PostgreSQL and the same work.

    uv run --group peers python bench/peers.py [--rounds 1] [--only crash,throughput,step,sleeps]

DBOS is installed only for this bench (`uv sync --group peers`; the `peers` dependency group is
not a default one). Each system gets a database of its own on the same server, one system
runs at a time, and the order alternates from round to round. The work (`peers_work.py`) is the
same workflow for both: `steps` steps whose bodies append `<workflow> <step>` to a file, then an
optional durable sleep. One worker process at concurrency 32 unless said otherwise. Settings:
each system's defaults, which are what its documentation gives for production; both are printed.

1. crash recovery (`crash`, first): 20 workflows of 10 steps of 300 ms on two worker processes;
   once every workflow has finished 2 steps, the worker holding the most is SIGKILLed and
   started again at once (as a supervisor would); the time from the kill until all 20 are done,
   and the step bodies that finished twice (a body that finished while its result was not
   recorded yet runs again). The same batch undisturbed, timed from the same moment, is the
   baseline: what is left of the work then (about 8 steps, 2.4 s) is the floor of any recovery,
   and the difference is the time the kill cost. DBOS recovers a dead executor's workflows
   when a process with its executor id starts again; Outlive's other worker takes them over as
   soon as PostgreSQL ended the dead process's session (docs/liveness.md).
2. `throughput`: 1,000 workflows of 10 steps (no delay) submitted at once to a running worker:
   workflows/s from the first submit to the last done, submit -> done p50/p99, and the CPU
   seconds of the PostgreSQL backends serving the system's database meanwhile.
3. `step`: one workflow of 200 steps alone: the time per step (first to last step completion).
4. `sleeps`: 1,000 workflows that each sleep durably for 5 s: lateness p50/p99, the wall clock
   at which the workflow went on after the sleep minus the wake time the system recorded for it
   (Outlive: the `waiting` event's `until`; DBOS: its `DBOS.sleep` operation's output). Outlive
   parks a sleeping run (its worker slot is free) and hands it back `OUTLIVE_WAKE_LEAD_S` before
   it is due, to finish the sleep in-process; DBOS sleeps in the process, holding a slot of its
   queue, so its 1,000 sleeps go 32 at a time.

Figures are from a machine shared with other work: compare the two systems within one run.
Needs PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL; default the local ones).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ADMIN_PG, bench_env, table

from outlive.config import Settings
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.jobs.relay import MARKER_KEY
from outlive.jobs.run_instances import SaqRunInstances

HERE = Path(__file__).resolve().parent
CONCURRENCY = 32
CRASH = {"workflows": 20, "steps": 10, "delay_ms": 300}


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def backend_cpu_s(database: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving `database` (by its process title)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not title.startswith("postgres: ") or f" {database} " not in title:
                continue
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        found[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    return found


class CpuMeter:
    """The server CPU a database's backends used between `start` and `stop`, sampled every
    0.5 s so that a backend that ends meanwhile still counts up to its last sample."""

    def __init__(self, database: str) -> None:
        self.database = database
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> CpuMeter:
        self._first = backend_cpu_s(self.database)
        self._last = dict(self._first)
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._last.update(backend_cpu_s(self.database))

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._last.update(backend_cpu_s(self.database))

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
    name: str
    database: str
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

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


async def wait_log(log: Path, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in await asyncio.to_thread(log.read_text, errors="replace"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{log.name} never said {text!r}")
        await asyncio.sleep(0.05)


# --- Outlive -------------------------------------------------------------------------------------


class OutliveSystem(System):
    def __init__(self, database_url: str, redis_url: str, tenants: int) -> None:
        super().__init__("outlive", make_url(database_url).database or "")
        self.database_url, self.redis_url, self.tenants_n = database_url, redis_url, tenants
        self.conn: asyncpg.Connection
        self.tenants: list[Any] = []
        self.queue = create_queue(redis_url, RUNS_QUEUE)
        self.instances = SaqRunInstances(
            self.queue,
            Settings(database_url=database_url, redis_url=redis_url, queue_timeout_s=60),
        )

    async def open(self) -> None:
        self.conn = await asyncpg.connect(self.database_url)
        await self.conn.execute(
            "INSERT INTO tenants (slug, name) SELECT 'p-' || i, 'p' || i"
            " FROM generate_series(1, $1) i",
            self.tenants_n,
        )
        self.tenants = [r["id"] for r in await self.conn.fetch("SELECT id FROM tenants")]
        await self.queue.redis.set(MARKER_KEY, "1")

    def settings_text(self) -> str:
        s = Settings(database_url=self.database_url, redis_url=self.redis_url)
        keys = ("run_heartbeat_s", "run_sweep_s", "relay_scan_s", "liveness_check_s", "wake_lead_s")
        shown = {k: getattr(s, k) for k in keys}
        shown |= {"db_pool_size": s.db_pool_size, "db_raw_pool_size": s.db_raw_pool_size}
        return f"outlive worker --concurrency {CONCURRENCY}; defaults: {json.dumps(shown)}"

    def start_worker(self, log: Path) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "OUTLIVE_AGENT_MODULES": "peers_work:AGENT",
            "PYTHONPATH": str(HERE),
            "OUTLIVE_LOG_FORMAT": "text",
        }
        args = [sys.executable, "-m", "outlive.cli", "worker", "--concurrency", str(CONCURRENCY)]
        with log.open("ab") as out:
            process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.workers.append(process)
        return process

    async def started(self, log: Path) -> None:
        await wait_log(log, "worker started")

    async def submit(self, count: int, payload: dict[str, Any]) -> list[str]:
        rows = await self.conn.fetch(
            "INSERT INTO runs (tenant_id, agent, input, dispatched_at)"
            " SELECT t, 'peer', $2::jsonb, now() FROM unnest($1::uuid[]) AS t RETURNING id",
            self.tenants[:count],
            json.dumps({_camel(k): v for k, v in payload.items()}),
        )
        ids = [r["id"] for r in rows]
        for at in range(0, len(ids), 50):
            await asyncio.gather(*(self.instances.start(i) for i in ids[at : at + 50]))
        return [str(i) for i in ids]

    async def finished(self, ids: list[str], timeout: float) -> list[Done]:
        deadline = time.monotonic() + timeout
        while True:
            rows = await self.conn.fetch(
                "SELECT id, extract(epoch FROM created_at) AS s,"
                " extract(epoch FROM finished_at) AS d, output, status FROM runs"
                " WHERE id = ANY($1::uuid[])"
                " AND status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')",
                ids,
            )
            if len(rows) == len(ids):
                bad = [r["status"] for r in rows if r["status"] != "SUCCEEDED"]
                if bad:
                    raise RuntimeError(f"outlive: {len(bad)} runs did not succeed: {bad[:3]}")
                return [
                    Done(str(r["id"]), float(r["s"]), float(r["d"]), json.loads(r["output"]))
                    for r in rows
                ]
            if time.monotonic() > deadline:
                raise RuntimeError(f"outlive: {len(rows)} of {len(ids)} done in {timeout}s")
            await asyncio.sleep(0.05)

    async def steps_done(self, ids: list[str]) -> dict[str, int]:
        rows = await self.conn.fetch(
            "SELECT id::text, step_seq FROM runs WHERE id = ANY($1::uuid[])", ids
        )
        return {r["id"]: r["step_seq"] for r in rows}

    async def step_times(self, workflow: str) -> list[float]:
        rows = await self.conn.fetch(
            "SELECT extract(epoch FROM completed_at) AS at FROM run_steps WHERE run_id = $1"
            " ORDER BY seq",
            workflow,
        )
        return [float(r["at"]) for r in rows]

    async def wake_times(self, ids: list[str]) -> dict[str, float]:
        rows = await self.conn.fetch(
            "SELECT run_id::text AS id, extract(epoch FROM CAST(data->>'until' AS timestamptz))"
            " AS due FROM run_events WHERE run_id = ANY($1::uuid[]) AND type = 'waiting'",
            ids,
        )
        return {r["id"]: float(r["due"]) for r in rows}

    async def holder_of_most(self, ids: list[str]) -> int:
        keys = await self.conn.fetch(
            "SELECT l.pid, r.worker_id, count(*) AS n FROM runs r JOIN pg_locks l"
            " ON l.locktype = 'advisory' AND l.objid = CAST(r.worker_id AS oid) AND l.granted"
            " WHERE r.id = ANY($1::uuid[]) AND r.status = 'RUNNING'"
            " GROUP BY 1, 2 ORDER BY 3 DESC",
            ids,
        )
        pid = keys[0]["pid"]
        # the backend's client port -> the worker process that owns it
        port = await self.conn.fetchval(
            "SELECT client_port FROM pg_stat_activity WHERE pid = $1", pid
        )
        for index, process in enumerate(self.workers):
            if process.poll() is None and _owns_port(process.pid, port):
                return index
        raise RuntimeError("no worker owns the liveness connection")

    async def close(self) -> None:
        await super().close()
        await self.conn.close()
        await self.queue.disconnect()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _owns_port(pid: int, port: int) -> bool:
    """True when process `pid` has a TCP socket whose local port is `port` (by /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table_path).read_text().splitlines()[1:]:
            parts = line.split()
            if int(parts[1].rsplit(":", 1)[1], 16) == port and parts[9] in inodes:
                return True
    return False


# --- DBOS ----------------------------------------------------------------------------------------


class DbosSystem(System):
    def __init__(self, database_url: str) -> None:
        super().__init__("dbos", make_url(database_url).database or "")
        self.database_url = database_url
        self.client: Any = None
        self.conn: asyncpg.Connection
        self.executors: list[str] = []

    async def open(self) -> None:
        from dbos import DBOSClient

        self.conn = await asyncpg.connect(self.database_url)
        self.client = DBOSClient(system_database_url=self.database_url)

    def settings_text(self) -> str:
        return (
            f"DBOS {_dbos_version()}: queue 'peers' worker_concurrency={CONCURRENCY}; defaults"
            " (queue polling 1 s, LISTEN/NOTIFY on, its pool sizes); executor id fixed"
        )

    def start_worker(self, log: Path, executor: str | None = None) -> subprocess.Popen[bytes]:
        executor = executor or f"peers-{len(self.workers)}"
        self.executors.append(executor)
        args = [
            sys.executable,
            str(HERE / "peers_dbos.py"),
            self.database_url,
            str(CONCURRENCY),
            executor,
        ]
        with log.open("ab") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.workers.append(process)
        return process

    async def started(self, log: Path) -> None:
        await wait_log(log, "dbos worker started")

    async def submit(self, count: int, payload: dict[str, Any]) -> list[str]:
        options = {"workflow_name": "peer", "queue_name": "peers"}

        def one(_: int) -> str:
            return str(self.client.enqueue(options, **payload).get_workflow_id())

        # Submitted from 16 threads: DBOS's client is synchronous (a pool of connections).
        loop = asyncio.get_running_loop()
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            return list(
                await asyncio.gather(*(loop.run_in_executor(pool, one, i) for i in range(count)))
            )

    async def finished(self, ids: list[str], timeout: float) -> list[Done]:
        deadline = time.monotonic() + timeout
        while True:
            rows = await self.conn.fetch(
                "SELECT workflow_uuid, created_at, updated_at, status FROM dbos.workflow_status"
                " WHERE workflow_uuid = ANY($1::text[]) AND status IN ('SUCCESS', 'ERROR')",
                ids,
            )
            if len(rows) == len(ids):
                bad = [r["status"] for r in rows if r["status"] != "SUCCESS"]
                if bad:
                    raise RuntimeError(f"dbos: {len(bad)} workflows did not succeed")
                outputs = await asyncio.gather(
                    *(asyncio.to_thread(self._result, r["workflow_uuid"]) for r in rows)
                )
                return [
                    Done(r["workflow_uuid"], r["created_at"] / 1000, r["updated_at"] / 1000, o)
                    for r, o in zip(rows, outputs, strict=True)
                ]
            if time.monotonic() > deadline:
                raise RuntimeError(f"dbos: {len(rows)} of {len(ids)} done in {timeout}s")
            await asyncio.sleep(0.05)

    def _result(self, workflow: str) -> Any:
        return self.client.retrieve_workflow(workflow).get_result()

    async def steps_done(self, ids: list[str]) -> dict[str, int]:
        rows = await self.conn.fetch(
            "SELECT workflow_uuid, count(*) AS n FROM dbos.operation_outputs"
            " WHERE workflow_uuid = ANY($1::text[]) GROUP BY 1",
            ids,
        )
        return {r["workflow_uuid"]: r["n"] for r in rows}

    async def step_times(self, workflow: str) -> list[float]:
        rows = await self.conn.fetch(
            "SELECT completed_at_epoch_ms FROM dbos.operation_outputs WHERE workflow_uuid = $1"
            " ORDER BY function_id",
            workflow,
        )
        return [r["completed_at_epoch_ms"] / 1000 for r in rows]

    async def wake_times(self, ids: list[str]) -> dict[str, float]:
        rows = await self.conn.fetch(
            "SELECT workflow_uuid, output FROM dbos.operation_outputs"
            " WHERE workflow_uuid = ANY($1::text[]) AND function_name = 'DBOS.sleep'",
            ids,
        )
        return {r["workflow_uuid"]: float(json.loads(r["output"])) for r in rows}

    async def holder_of_most(self, ids: list[str]) -> int:
        executor = await self.conn.fetchval(
            "SELECT executor_id FROM dbos.workflow_status WHERE workflow_uuid = ANY($1::text[])"
            " AND status = 'PENDING' GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
            ids,
        )
        return self.executors.index(executor)

    def restart(self, victim: int, log: Path) -> None:
        self.start_worker(log, self.executors[victim])  # DBOS recovers by executor id

    async def close(self) -> None:
        await super().close()
        await self.conn.close()
        if self.client is not None:
            self.client.destroy()


def _dbos_version() -> str:
    from importlib.metadata import version

    return version("dbos")


# --- the measures --------------------------------------------------------------------------------


async def crash(system: System, logs: Path, kill: bool = True) -> dict[str, float]:
    """The crash batch; with `kill` False, the same batch undisturbed (the baseline: what is left
    of the work once every workflow has finished 2 steps, timed from that moment)."""
    counter = Path(tempfile.mkstemp(prefix=f"peers-{system.name}-", suffix=".txt")[1])
    phase = "crash" if kill else "undisturbed"  # a log of its own: `started` reads it
    for i in range(2):
        system.start_worker(logs / f"{system.name}-{phase}-{i}.log")
    for i in range(2):
        await system.started(logs / f"{system.name}-{phase}-{i}.log")
    payload = {"steps": CRASH["steps"], "delay_ms": CRASH["delay_ms"], "counter_file": str(counter)}
    ids = await system.submit(CRASH["workflows"], payload)
    deadline = time.monotonic() + 120
    while min((await system.steps_done(ids)).values() or [0]) < 2 or len(
        await system.steps_done(ids)
    ) < len(ids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{system.name}: the workflows never all got going")
        await asyncio.sleep(0.05)
    if not kill:
        began = time.time()
        done = await system.finished(ids, timeout=180)
        await asyncio.to_thread(counter.unlink)
        return {"undisturbed_s": max(d.done for d in done) - began}
    victim = await system.holder_of_most(ids)
    system.workers[victim].send_signal(signal.SIGKILL)
    killed = time.time()
    system.workers[victim].wait()
    restarted = logs / f"{system.name}-crash-restart.log"
    system.restart(victim, restarted)  # a supervisor starts it again at once
    done = await system.finished(ids, timeout=180)
    lines = (await asyncio.to_thread(counter.read_text)).splitlines()
    await asyncio.to_thread(counter.unlink)
    return {
        "recovery_s": max(d.done for d in done) - killed,
        "twice": len(lines) - len(set(lines)),
        "bodies": len(lines),
    }


async def throughput(system: System, logs: Path, count: int) -> dict[str, float]:
    system.start_worker(logs / f"{system.name}-tput.log")
    await system.started(logs / f"{system.name}-tput.log")
    async with CpuMeter(system.database) as cpu:
        ids = await system.submit(count, {"steps": 10})
        done = await system.finished(ids, timeout=600)
    first = min(d.submitted for d in done)
    last = max(d.done for d in done)
    latency = [d.done - d.submitted for d in done]
    return {
        "per_s": count / (last - first),
        "p50_s": pct(latency, 50),
        "p99_s": pct(latency, 99),
        "cpu_s": cpu.seconds,
    }


async def one_step(system: System) -> dict[str, float]:
    ids = await system.submit(1, {"steps": 200})
    await system.finished(ids, timeout=300)
    times = await system.step_times(ids[0])
    times = times[-200:]
    return {"step_ms": (times[-1] - times[0]) / (len(times) - 1) * 1000}


async def sleeps(system: System, count: int) -> dict[str, float]:
    ids = await system.submit(count, {"steps": 0, "sleep_s": 5.0})
    done = await system.finished(ids, timeout=300)
    due = await system.wake_times(ids)
    late = [float(d.output["wokeAt"]) - due[d.id] for d in done]
    span = max(d.done for d in done) - min(d.submitted for d in done)
    return {
        "late_p50_ms": pct(late, 50) * 1000,
        "late_p99_ms": pct(late, 99) * 1000,
        "sleeps_all_s": span,
    }


@contextlib.asynccontextmanager
async def dbos_database() -> AsyncIterator[str]:
    name = f"peers_dbos_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(ADMIN_PG)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(ADMIN_PG).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@contextlib.asynccontextmanager
async def system_for(name: str, tenants: int) -> AsyncIterator[System]:
    if name == "outlive":
        async with bench_env() as env:
            outlive = OutliveSystem(env.database_url, env.redis_url, tenants)
            await outlive.open()
            try:
                yield outlive
            finally:
                await outlive.close()
    else:
        async with dbos_database() as url:
            dbos = DbosSystem(url)
            await dbos.open()
            try:
                yield dbos
            finally:
                await dbos.close()


async def measure(name: str, only: set[str], count: int, logs: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    if "crash" in only:
        async with system_for(name, CRASH["workflows"]) as system:
            figures |= await crash(system, logs)
        async with system_for(name, CRASH["workflows"]) as system:
            figures |= await crash(system, logs, kill=False)
        figures["lost_s"] = figures["recovery_s"] - figures["undisturbed_s"]
    if only & {"throughput", "step", "sleeps"}:
        async with system_for(name, count) as system:
            print(f"  {system.settings_text()}")  # type: ignore[attr-defined]
            if "throughput" in only:
                figures |= await throughput(system, logs, count)
            else:
                system.start_worker(logs / f"{name}-tput.log")
                await system.started(logs / f"{name}-tput.log")
            if "step" in only:
                figures |= await one_step(system)
            if "sleeps" in only:
                figures |= await sleeps(system, count)
    return figures


ROWS = (
    ("crash: kill -> all 20 done (s)", "recovery_s", "{:.2f}"),
    ("crash: the same batch, no kill (s)", "undisturbed_s", "{:.2f}"),
    ("crash: time lost to the kill (s)", "lost_s", "{:.2f}"),
    ("crash: step bodies finished twice", "twice", "{:.0f}"),
    ("throughput: workflows/s (10 steps)", "per_s", "{:.0f}"),
    ("submit -> done p50 (s)", "p50_s", "{:.2f}"),
    ("submit -> done p99 (s)", "p99_s", "{:.2f}"),
    ("server CPU (s)", "cpu_s", "{:.1f}"),
    ("one step (ms)", "step_ms", "{:.2f}"),
    ("sleep 5 s lateness p50 (ms)", "late_p50_ms", "{:.0f}"),
    ("sleep 5 s lateness p99 (ms)", "late_p99_ms", "{:.0f}"),
    ("sleeps: first submit -> all done (s)", "sleeps_all_s", "{:.1f}"),
)


def report(rounds: list[dict[str, dict[str, float]]]) -> str:
    rows = []
    for label, key, fmt in ROWS:
        cells = []
        for name in ("outlive", "dbos"):
            values = [r[name][key] for r in rounds if key in r.get(name, {})]
            if not values:
                cells.append("-")
                continue
            med = statistics.median(values)
            cells.append(
                fmt.format(med)
                + (
                    f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
                    if len(values) > 1
                    else ""
                )
            )
        if cells != ["-", "-"]:
            rows.append([label, *cells, _ratios(rounds, key)])
    headers = ["measure", "Outlive median (range)", "DBOS median (range)", "Outlive/DBOS by round"]
    return table(rows, headers)


def _ratios(rounds: list[dict[str, dict[str, float]]], key: str) -> str:
    """Outlive's figure over DBOS's, in each round where both have it (same run, same load)."""
    pairs = [(r["outlive"].get(key), r["dbos"].get(key)) for r in rounds if len(r) == 2]
    ratios = [f"{o / d:.2f}" for o, d in pairs if o is not None and d]
    return ", ".join(ratios) or "-"


async def main() -> None:
    await _main()  # `bench_env` claims a Redis db index of its own


async def _main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="crash,throughput,step,sleeps")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument(
        "--systems", default="outlive,dbos", help="one alone: a quick loop, no comparison"
    )
    args = parser.parse_args()
    systems = args.systems.split(",")
    only = set(args.only.split(","))
    logs = Path(tempfile.mkdtemp(prefix="outlive-peers-"))
    print(f"logs in {logs}; a shared machine: compare within this run only")
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        this: dict[str, dict[str, float]] = {}
        for name in order:
            print(f"round {r + 1}: {name}", flush=True)
            into = logs / f"round-{r + 1}"  # a log of its own per round: "started" is per round
            into.mkdir(exist_ok=True)
            this[name] = await measure(name, only, args.count, into)
            print(f"  {json.dumps({k: round(v, 3) for k, v in this[name].items()})}", flush=True)
        rounds.append(this)
    print(report(rounds))


if __name__ == "__main__":
    asyncio.run(main())
