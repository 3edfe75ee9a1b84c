"""DBOS Transact's adapter in `bench/peers.py`: `peers_dbos_worker.py` processes, workflows
enqueued through DBOS's client, the figures read from its system database (`dbos.*` tables)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
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
            str(HERE / "peers_dbos_worker.py"),
            self.database_url,
            str(CONCURRENCY),
            executor,
        ]
        process: subprocess.Popen[bytes] = worker_process(args, log)
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
        with ThreadPoolExecutor(16) as pool:
            return list(
                await asyncio.gather(*(loop.run_in_executor(pool, one, i) for i in range(count)))
            )

    async def finished(self, ids: list[str], timeout: float) -> list[Done]:
        async def read() -> list[Any]:
            return list(
                await self.conn.fetch(
                    "SELECT workflow_uuid, created_at, updated_at, status"
                    " FROM dbos.workflow_status"
                    " WHERE workflow_uuid = ANY($1::text[]) AND status IN ('SUCCESS', 'ERROR')",
                    ids,
                )
            )

        rows = await poll_until_all(self.name, len(ids), timeout, read)
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


@contextlib.asynccontextmanager
async def dbos_system() -> AsyncIterator[System]:
    async with fresh_database("peers_dbos") as url:
        dbos = DbosSystem(url)
        await dbos.open()
        try:
            yield dbos
        finally:
            await dbos.close()
