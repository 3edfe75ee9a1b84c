"""Restate's adapter in `bench/peers.py`: a `restate-server` of its own (a fresh data directory,
ports of its own), `peers_restate_worker.py` service processes registered as one deployment,
invocations sent through its ingress, the figures read from its SQL introspection
(`sys_invocation`, `sys_journal`).

The server comes from npm (`@restatedev/restate-server`, a binary inside the package). On first
use the bench installs it with `npm install --prefix <cache>` (`$XDG_CACHE_HOME`, else
`~/.cache`, under `outlive-peers/restate`); `RESTATE_SERVER=/path/to/restate-server` uses
another. Without npm or the package, Restate is skipped with a message saying so.

Settings: the server's defaults, which are its production profile but for `auto-provision` (off
with `--production`, for multi-node clusters; a single node provisions itself): a single node,
24 partitions, the replicated loglet on RocksDB with its WAL fsynced, the invoker's default
retry policy (500 ms doubling up to 1 min), at most 1,000 invocations in flight. Telemetry is
off (`RESTATE_DISABLE_TELEMETRY`: the machine has no network). The deployment is served as its
documentation gives for production (`peers_restate_worker.py`). The server's own CPU is the
"server CPU" row (Restate keeps its log and state itself: no PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from _common import free_port
from _peers import (
    HERE,
    CpuMeter,
    Done,
    System,
    poll_until_all,
    process_cpu_s,
    socket_inodes,
    tcp_sockets,
    wait_log,
    worker_process,
)

SERVER_VERSION = "1.7.12"  # the newest release before the lock's cut-off (2026-12-01)
SUBMITTERS = 16


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "outlive-peers" / "restate"


def server_binary(install: bool = True) -> Path | None:
    """The restate-server binary: `$RESTATE_SERVER`, else the cache's, installed there from npm
    on first use; None when there is none and npm cannot install it."""
    if os.environ.get("RESTATE_SERVER"):
        return Path(os.environ["RESTATE_SERVER"])
    found = sorted(cache_dir().glob("node_modules/@restatedev/restate-server-*/bin/restate-server"))
    if found or not install or shutil.which("npm") is None:
        return found[0] if found else None
    print(f"  installing @restatedev/restate-server@{SERVER_VERSION} into {cache_dir()}")
    cache_dir().mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            *("npm", "install", "--prefix", str(cache_dir()), "--no-audit", "--no-fund"),
            f"@restatedev/restate-server@{SERVER_VERSION}",
        ],
        capture_output=True,
        check=False,
    )
    if done.returncode:
        print(f"  npm install failed: {done.stderr.decode()[-500:]}")
    return server_binary(install=False)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class RestateSystem(System):
    def __init__(self, binary: Path) -> None:
        super().__init__("restate", "")
        self.binary = binary
        self.base = Path(tempfile.mkdtemp(prefix="outlive-peers-restate-"))
        self.ingress, self.admin, self.node = free_port(), free_port(), free_port()
        self.service_port = free_port()
        self.server: subprocess.Popen[bytes] | None = None
        self.http = httpx.AsyncClient(timeout=60)
        self.registered = False

    async def open(self) -> None:
        env = {
            **os.environ,
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LISTEN_MODE": "tcp",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin}",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{self.node}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{self.node}/",
        }
        args = [str(self.binary), "--no-logo", "--base-dir", str(self.base / "data")]
        self.server = worker_process(args, self.base / "server.log", env)
        for _ in range(1200):
            with contextlib.suppress(httpx.HTTPError):
                ingress = await self.http.get(f"http://127.0.0.1:{self.ingress}/restate/health")
                admin = await self.http.get(f"http://127.0.0.1:{self.admin}/health")
                if ingress.status_code == admin.status_code == 200:
                    return
            if self.server.poll() is not None:
                break
            await asyncio.sleep(0.1)
        raise RuntimeError(f"restate-server never got ready: see {self.base / 'server.log'}")

    def settings_text(self) -> str:
        return (
            f"restate-server {SERVER_VERSION} defaults (single node, telemetry off); restate-sdk"
            f" {version('restate-sdk')} on Hypercorn {version('hypercorn')}, HTTP/2, Restate's"
            " production Hypercorn settings; no cap on concurrency but the server's 1,000"
        )

    def cpu(self) -> CpuMeter:
        pid = self.server.pid if self.server is not None else 0
        return CpuMeter(lambda: process_cpu_s([pid]))

    def start_worker(self, log: Path) -> Any:
        args = [sys.executable, str(HERE / "peers_restate_worker.py"), str(self.service_port)]
        process = worker_process(args, log)
        self.workers.append(process)
        return process

    async def started(self, log: Path) -> None:
        await wait_log(log, "restate worker started")
        if self.registered:
            return
        reply = await self.http.post(
            f"http://127.0.0.1:{self.admin}/deployments",
            json={"uri": f"http://127.0.0.1:{self.service_port}"},
        )
        if reply.status_code >= 300:
            raise RuntimeError(f"restate: registering the deployment: {reply.text}")
        self.registered = True

    async def submit(self, count: int, payload: dict[str, Any]) -> list[str]:
        url = f"http://127.0.0.1:{self.ingress}/peer/run/send"
        ids: list[str] = []

        async def lane(n: int) -> None:
            for _ in range(n):
                reply = await self.http.post(url, json=payload)
                reply.raise_for_status()
                ids.append(reply.json()["invocationId"])

        shares = [count // SUBMITTERS + (i < count % SUBMITTERS) for i in range(SUBMITTERS)]
        await asyncio.gather(*(lane(n) for n in shares))
        return ids

    async def query(self, sql: str) -> list[dict[str, Any]]:
        reply = await self.http.post(
            f"http://127.0.0.1:{self.admin}/query",
            json={"query": sql},
            headers={"accept": "application/json"},
        )
        if reply.status_code != 200:
            raise RuntimeError(f"restate query: {reply.status_code} {reply.text[:300]}")
        rows: list[dict[str, Any]] = reply.json()["rows"]
        return rows

    async def finished(self, ids: list[str], timeout: float) -> list[Done]:
        listed = _listed(ids)

        async def read() -> list[Any]:
            await asyncio.sleep(0.2)  # the query engine costs the server CPU: not every 50 ms
            return await self.query(
                "SELECT id, created_at, completed_at, completion_result FROM sys_invocation"  # noqa: S608
                f" WHERE id IN ({listed}) AND status = 'completed'"  # (ids checked by _listed)
            )

        rows = await poll_until_all(self.name, len(ids), timeout, read)
        bad = [r["completion_result"] for r in rows if r["completion_result"] != "success"]
        if bad:
            raise RuntimeError(f"restate: {len(bad)} invocations failed")
        lanes = asyncio.Semaphore(SUBMITTERS)

        async def output(invocation: str) -> Any:
            async with lanes:
                url = f"http://127.0.0.1:{self.ingress}/restate/invocation/{invocation}/output"
                return (await self.http.get(url)).json()

        outputs = await asyncio.gather(*(output(r["id"]) for r in rows))
        return [
            Done(r["id"], _epoch(r["created_at"]), _epoch(r["completed_at"]), o)
            for r, o in zip(rows, outputs, strict=True)
        ]

    async def steps_done(self, ids: list[str]) -> dict[str, int]:
        rows = await self.query(
            f"SELECT id, count(*) AS n FROM sys_journal WHERE id IN ({_listed(ids)})"  # noqa: S608  (ids checked by _listed)
            " AND entry_type = 'Notification: Run' GROUP BY id"
        )
        return {r["id"]: int(r["n"]) for r in rows}

    async def step_times(self, workflow: str) -> list[float]:
        rows = await self.query(
            f"SELECT appended_at FROM sys_journal WHERE id IN ({_listed([workflow])})"  # noqa: S608  (ids checked by _listed)
            " AND entry_type = 'Notification: Run' ORDER BY index"
        )
        return [_epoch(r["appended_at"]) for r in rows]

    async def wake_times(self, ids: list[str]) -> dict[str, float]:
        rows = await self.query(
            f"SELECT id, entry_json FROM sys_journal WHERE id IN ({_listed(ids)})"  # noqa: S608  (ids checked by _listed)
            " AND entry_type = 'Command: Sleep'"
        )
        return {
            r["id"]: json.loads(r["entry_json"])["Command"]["Sleep"]["wake_up_time"] / 1000
            for r in rows
        }

    async def holder_of_most(self, ids: list[str]) -> int:
        """The worker holding the most of the server's connections (HTTP/2: an invocation is a
        stream of one of them, 128 at most a connection)."""
        connections = [
            inode for _, _, state, inode in tcp_sockets(self.service_port) if state == "01"
        ]
        held = [
            sum(inode in socket_inodes(p.pid) for inode in connections) if p.poll() is None else -1
            for p in self.workers
        ]
        if max(held) <= 0:
            raise RuntimeError("restate: no worker holds a connection from the server")
        return held.index(max(held))

    async def close(self) -> None:
        await super().close()
        await self.http.aclose()
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def _listed(ids: list[str]) -> str:
    """The ids as an SQL list (the introspection takes no bound parameters): checked first."""
    if not all(re.fullmatch(r"inv_[0-9A-Za-z]+", i) for i in ids):
        raise ValueError("not a Restate invocation id")
    return ", ".join(f"'{i}'" for i in ids)


@contextlib.asynccontextmanager
async def restate_system(binary: Path) -> AsyncIterator[System]:
    restate = RestateSystem(binary)
    try:
        await restate.open()
        yield restate
    finally:
        await restate.close()
