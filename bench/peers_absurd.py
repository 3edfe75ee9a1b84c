"""Absurd's adapter in `bench/peers.py`: `peers_absurd_worker.py` processes on a database of its
own, tasks spawned through Absurd's SDK, the figures read from its tables (`absurd.t_peers`,
`r_peers`, `c_peers`: tasks, runs, checkpoints).

Absurd needs its SQL schema in the database first. Its documentation installs it with
`absurdctl init` (or the same SQL in the application's own migrations, which it recommends for
production); `absurdctl` (on PyPI, in the `peers` group) bundles the schema of its release, which
the bench applies as is, then creates the queue `peers` (unpartitioned, Absurd's default).

The worker is Absurd's asyncio one (`AsyncAbsurd.start_worker`), since every system here runs the
same coroutine step bodies: it claims up to `concurrency` tasks at once and claims again when
that batch has finished or suspended (its code gathers the batch), on one connection; its
documentation scales workers by processes. Absurd's threaded worker refills slots as tasks
finish instead; it is not the one measured.

A crashed worker's tasks stay claimed until their lease (the worker's claim timeout, renewed by
each checkpoint) expires; then the next claim by any worker fails the dead run and retries the
task, whose finished steps are replayed from their checkpoints. The bench keeps the 120 s its
documentation gives for `claim_timeout`; a shorter lease recovers sooner, and runs a task twice
at once when a step outlasts it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import asyncpg
from _peers import (
    CONCURRENCY,
    HERE,
    Done,
    System,
    fresh_database,
    poll_until_all,
    wait_log,
    worker_process,
)
from sqlalchemy.engine import make_url

QUEUE = "peers"
CLAIM_TIMEOUT_S = 120  # absurd_sdk's default and its documentation's example
SPAWNERS = 8  # connections that spawn tasks at once (one SDK client each)


class AbsurdSystem(System):
    def __init__(self, database_url: str) -> None:
        super().__init__("absurd", make_url(database_url).database or "")
        self.database_url = database_url
        self.conn: asyncpg.Connection
        self.clients: list[Any] = []
        self.worker_ids: list[str] = []

    async def open(self) -> None:
        import absurdctl  # type: ignore[import-untyped, unused-ignore]
        from absurd_sdk import AsyncAbsurd

        self.conn = await asyncpg.connect(self.database_url)
        await self.conn.execute(absurdctl.BUNDLED_SCHEMA_SQL)
        await self.conn.execute("SELECT absurd.create_queue($1)", QUEUE)
        self.clients = [AsyncAbsurd(self.database_url, queue_name=QUEUE) for _ in range(SPAWNERS)]

    def settings_text(self) -> str:
        schema = version("absurdctl")
        return (
            f"Absurd {version('absurd-sdk')} (schema {schema} from absurdctl): queue {QUEUE!r}"
            f" unpartitioned; AsyncAbsurd.start_worker(concurrency={CONCURRENCY},"
            f" claim_timeout={CLAIM_TIMEOUT_S}, poll_interval=0.25); spawn defaults"
            " (max_attempts 5, no retry delay)"
        )

    def start_worker(self, log: Path) -> Any:
        worker = f"peers-{len(self.workers)}"
        self.worker_ids.append(worker)
        args = [
            sys.executable,
            str(HERE / "peers_absurd_worker.py"),
            self.database_url,
            str(CONCURRENCY),
            worker,
            str(CLAIM_TIMEOUT_S),
        ]
        process = worker_process(args, log)
        self.workers.append(process)
        return process

    async def started(self, log: Path) -> None:
        await wait_log(log, "absurd worker started")

    async def submit(self, count: int, payload: dict[str, Any]) -> list[str]:
        async def spawn(client: Any, n: int) -> list[str]:
            return [
                str((await client.spawn("peer", payload, queue=QUEUE))["task_id"]) for _ in range(n)
            ]

        shares = [count // SPAWNERS + (i < count % SPAWNERS) for i in range(SPAWNERS)]
        spawned = await asyncio.gather(
            *(spawn(c, n) for c, n in zip(self.clients, shares, strict=True))
        )
        return [task for part in spawned for task in part]

    async def finished(self, ids: list[str], timeout: float) -> list[Done]:
        async def read() -> list[Any]:
            return list(
                await self.conn.fetch(
                    "SELECT t.task_id::text AS id, t.state, t.completed_payload,"
                    " extract(epoch FROM t.enqueue_at) AS s,"
                    " extract(epoch FROM r.completed_at) AS d"
                    " FROM absurd.t_peers t JOIN absurd.r_peers r ON r.run_id = t.last_attempt_run"
                    " WHERE t.task_id = ANY($1::uuid[])"
                    " AND t.state IN ('completed', 'failed', 'cancelled')",
                    ids,
                )
            )

        rows = await poll_until_all(self.name, len(ids), timeout, read)
        bad = [r["state"] for r in rows if r["state"] != "completed"]
        if bad:
            raise RuntimeError(f"absurd: {len(bad)} tasks did not complete: {bad[:3]}")
        return [
            Done(r["id"], float(r["s"]), float(r["d"]), json.loads(r["completed_payload"]))
            for r in rows
        ]

    async def steps_done(self, ids: list[str]) -> dict[str, int]:
        rows = await self.conn.fetch(
            "SELECT task_id::text AS id, count(*) AS n FROM absurd.c_peers"
            " WHERE task_id = ANY($1::uuid[]) AND checkpoint_name ~ '^s(#[0-9]+)?$'"
            " GROUP BY 1",
            ids,
        )
        return {r["id"]: r["n"] for r in rows}

    async def step_times(self, workflow: str) -> list[float]:
        rows = await self.conn.fetch(
            "SELECT extract(epoch FROM updated_at) AS at FROM absurd.c_peers"
            " WHERE task_id = $1::uuid AND checkpoint_name ~ '^s(#[0-9]+)?$' ORDER BY updated_at",
            workflow,
        )
        return [float(r["at"]) for r in rows]

    async def wake_times(self, ids: list[str]) -> dict[str, float]:
        rows = await self.conn.fetch(
            "SELECT task_id::text AS id, state FROM absurd.c_peers"
            " WHERE task_id = ANY($1::uuid[]) AND checkpoint_name = 'sleep'",
            ids,
        )
        return {r["id"]: datetime.fromisoformat(json.loads(r["state"])).timestamp() for r in rows}

    async def holder_of_most(self, ids: list[str]) -> int:
        worker = await self.conn.fetchval(
            "SELECT claimed_by FROM absurd.r_peers WHERE task_id = ANY($1::uuid[])"
            " AND state = 'running' GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
            ids,
        )
        return self.worker_ids.index(worker)

    async def close(self) -> None:
        await super().close()
        for client in self.clients:
            await client.close()
        await self.conn.close()


@contextlib.asynccontextmanager
async def absurd_system() -> AsyncIterator[System]:
    async with fresh_database("peers_absurd") as url:
        absurd = AbsurdSystem(url)
        await absurd.open()
        try:
            yield absurd
        finally:
            await absurd.close()
