"""Outlive's adapter in `bench/peers.py`: `outlive worker` processes running `peers_work.py`'s
agent, runs inserted and started as the API would, the figures read from its tables."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
from _common import bench_env
from _peers import (
    CONCURRENCY,
    HERE,
    Done,
    System,
    poll_until_all,
    socket_inodes,
    tcp_sockets,
    wait_log,
    worker_process,
)
from sqlalchemy.engine import make_url

from outlive.config import Settings
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.jobs.relay import MARKER_KEY
from outlive.jobs.run_instances import SaqRunInstances


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
            # this checkout's Outlive, not the one the venv has installed (a worktree's bench)
            "PYTHONPATH": os.pathsep.join((str(HERE), str(HERE.parent / "src"))),
            "OUTLIVE_LOG_FORMAT": "text",
        }
        args = [sys.executable, "-m", "outlive.cli", "worker", "--concurrency", str(CONCURRENCY)]
        process: subprocess.Popen[bytes] = worker_process(args, log, env)
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
        async def read() -> list[Any]:
            return list(
                await self.conn.fetch(
                    "SELECT id, extract(epoch FROM created_at) AS s,"
                    " extract(epoch FROM finished_at) AS d, output, status FROM runs"
                    " WHERE id = ANY($1::uuid[])"
                    " AND status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')",
                    ids,
                )
            )

        rows = await poll_until_all(self.name, len(ids), timeout, read)
        bad = [r["status"] for r in rows if r["status"] != "SUCCEEDED"]
        if bad:
            raise RuntimeError(f"outlive: {len(bad)} runs did not succeed: {bad[:3]}")
        return [
            Done(str(r["id"]), float(r["s"]), float(r["d"]), json.loads(r["output"])) for r in rows
        ]

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
    inodes = socket_inodes(pid)
    return any(inode in inodes for *_, inode in tcp_sockets(port))


@contextlib.asynccontextmanager
async def outlive_system(tenants: int) -> AsyncIterator[System]:
    async with bench_env() as env:
        outlive = OutliveSystem(env.database_url, env.redis_url, tenants)
        await outlive.open()
        try:
            yield outlive
        finally:
            await outlive.close()
