"""The real processes the browser tests drive: `outlive api` and `outlive worker` on a database and
a Redis db index of their own, plus the helpers to reach them from the test (tokens, GraphQL over
HTTP, waiting for a run to settle by listening to its nudges).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
from redis import Redis

from outlive.realtime.nudges import channel_prefix
from outlive.urls import PostgresUrl

T = TypeVar("T")
SETTLED = ("SUCCEEDED", "FAILED", "CANCELLED")
CLAIM_PREFIX = "outlive:test-run:db"  # the same claims as tests/conftest.py: runs never share a db


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to the end in a thread of its own: Playwright's sync API keeps an event
    loop running in the test's thread, where `asyncio.run` refuses to start."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LoggedProcess:
    """A child process whose output goes to a log file, with a way to wait for a line of it."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._done = False
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name=f"log-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("a") as out, self.proc.stdout:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                with self._changed:
                    self._lines.append(line)
                    self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float, *, start: int = 0) -> str:
        """The first line (from line `start` on) matching `pattern`; fails if the process ends."""
        regex = re.compile(pattern)
        with self._changed:
            index = start
            ok = self._changed.wait_for(
                lambda: self._done or any(regex.search(x) for x in self._lines[index:]),
                timeout=timeout,
            )
            for line in self._lines[index:]:
                if regex.search(line):
                    return line
        why = "exited" if self._done else f"said nothing matching {pattern!r} in {timeout}s"
        if not ok or self._done:
            raise AssertionError(f"{self.name} {why}; its output:\n{self.tail()}")
        raise AssertionError(f"{self.name}: no line matching {pattern!r}")

    @property
    def line_count(self) -> int:
        with self._changed:
            return len(self._lines)

    def tail(self, lines: int = 60) -> str:
        with self._changed:
            return "".join(self._lines[-lines:])

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM (a graceful shutdown: the API closes sockets with 1012), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        return self.proc.returncode


def outlive_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "outlive.cli", *args]


def _asyncpg_dsn(url: str) -> str:
    return str(PostgresUrl.parse(url))


def _with_database(url: str, name: str) -> str:
    return str(PostgresUrl.parse(url).with_database(name))


def _redis_with_index(url: str, index: int) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return urlunsplit(parts._replace(query=f"db={index}"))
    return urlunsplit(parts._replace(path=f"/{index}", query=""))


def claim_redis_index(base_url: str, run_id: str) -> int:
    """A Redis db index nobody claimed and nobody uses (a benchmark may use one unclaimed)."""
    admin = Redis.from_url(_redis_with_index(base_url, 0))
    try:
        for index in range(15, 0, -1):
            key = f"{CLAIM_PREFIX}{index}"
            if not admin.set(key, run_id, nx=True, ex=6 * 3600):
                continue
            probe = Redis.from_url(_redis_with_index(base_url, index))
            try:
                empty = probe.dbsize() == 0
            finally:
                probe.close()
            if empty:
                return index
            admin.delete(key)
    finally:
        admin.close()
    raise AssertionError("no free Redis db index (1-15): every one is claimed or in use")


def release_redis_index(base_url: str, index: int) -> None:
    db = Redis.from_url(_redis_with_index(base_url, index))
    admin = Redis.from_url(_redis_with_index(base_url, 0))
    try:
        db.flushdb()
        admin.delete(f"{CLAIM_PREFIX}{index}")
    finally:
        db.close()
        admin.close()


@dataclass
class Tenant:
    slug: str
    token: str
    id: str = ""


@dataclass
class Stack:
    admin_url: str
    redis_base: str
    workdir: Path
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    database_url: str = ""
    redis_url: str = ""
    redis_index: int = 0
    port: int = 0
    api: LoggedProcess | None = None
    worker: LoggedProcess | None = None
    api_starts: int = 0
    agent_modules: str = ""  # `OUTLIVE_AGENT_MODULES` of the API and the worker (`deploy`)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "OUTLIVE_RUN_RETRY_DELAY_S": "0.2",
            # the console's redeliver test posts to a receiver on this machine
            "OUTLIVE_WEBHOOK_ALLOW_PRIVATE": "1",
            "PYTHONUNBUFFERED": "1",
            **({"OUTLIVE_AGENT_MODULES": self.agent_modules} if self.agent_modules else {}),
        }

    # --- lifecycle ----------------------------------------------------------------------------

    def up(self) -> None:
        name = f"outlive_browser_{self.run_id}"
        self.redis_index = claim_redis_index(self.redis_base, self.run_id)
        self.redis_url = _redis_with_index(self.redis_base, self.redis_index)
        run_async(self._admin(f'CREATE DATABASE "{name}"'))
        self.database_url = _with_database(self.admin_url, name)
        migrated = subprocess.run(
            outlive_argv("migrate"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        self.port = free_port()
        self.worker = self.start_worker()
        self.start_api()

    def deploy(self, agent_modules: str = "") -> None:
        """A deploy: the API and the worker stopped, then started on `agent_modules` (more
        agents beside the built-in ones; "" none), as a new version of the code would be."""
        assert self.api is not None
        assert self.worker is not None
        self.stop_api()
        self.worker.stop()
        self.agent_modules = agent_modules
        self.worker = self.start_worker()
        self.start_api()

    def down(self) -> None:
        for proc in (self.api, self.worker):
            if proc is not None:
                proc.stop()
        if self.redis_index:
            release_redis_index(self.redis_base, self.redis_index)
        if self.database_url:
            name = PostgresUrl.parse(self.database_url).database
            run_async(self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def start_worker(self, name: str = "worker", **extra_env: str) -> LoggedProcess:
        """Another `outlive worker` on the stack's database and Redis (`extra_env` on top)."""
        proc = LoggedProcess(
            name,
            outlive_argv("worker", "--concurrency", "8"),
            {**self.env, **extra_env},
            self.workdir / f"{name}-{secrets.token_hex(3)}.log",
        )
        proc.wait_for_line(r"worker started", timeout=60)
        return proc

    def start_api(self) -> None:
        """`outlive api` on the stack's port; returns once uvicorn says it is serving."""
        assert self.api is None or self.api.proc.poll() is not None, "the API is running"
        self.api_starts += 1
        self.api = LoggedProcess(
            "api",
            outlive_argv("api", "--port", str(self.port)),
            self.env,
            self.workdir / f"api-{self.api_starts}.log",
        )
        self.api.wait_for_line(r"Uvicorn running on", timeout=60)

    def stop_api(self) -> None:
        assert self.api is not None
        code = self.api.stop()
        # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is done
        assert code in (0, -signal.SIGTERM), (
            f"the API did not stop cleanly ({code}):\n{self.api.tail()}"
        )
        self.api.wait_for_line(r"Finished server process", timeout=1)

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(_asyncpg_dsn(self.admin_url))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    # --- helpers for the tests ----------------------------------------------------------------

    def new_tenant(self, prefix: str = "web") -> Tenant:
        slug = f"{prefix}-{secrets.token_hex(4)}"
        done = subprocess.run(
            outlive_argv("token", "create", "--tenant", slug, "--email", f"owner@{slug}.test"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        tenant = Tenant(slug=slug, token=done.stdout.strip().splitlines()[-1])
        tenant.id = self.gql(tenant, "{ viewer { tenant { id } } }")["viewer"]["tenant"]["id"]
        return tenant

    def gql(self, tenant: Tenant, query: str, variables: dict[str, Any] | None = None) -> Any:
        response = httpx.post(
            f"{self.base_url}/graphql",
            json={"query": query, "variables": variables or {}},
            headers={"Authorization": f"Bearer {tenant.token}"},
            timeout=30,
        )
        body = response.json()
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def start_run(self, tenant: Tenant, **input: Any) -> str:
        return self._start(tenant, {"agent": "demo", "input": input})

    def start_keyed(self, tenant: Tenant, key: str, **input: object) -> str:
        """A demo run of its own key (one run of a key is active at a time)."""
        return self._start(tenant, {"agent": "demo", "key": key, "input": input}, created=True)

    def _start(self, tenant: Tenant, start: dict[str, Any], *, created: bool = False) -> str:
        data = self.gql(
            tenant,
            "mutation($input: StartRunInput!) { startRun(input: $input) { created run { id } } }",
            {"input": start},
        )
        if created:
            assert data["startRun"]["created"] is True
        run_id: str = data["startRun"]["run"]["id"]
        return run_id

    def run_status(self, run_id: str) -> str:
        return self.run_row(run_id)[0]

    def run_row(self, run_id: str) -> tuple[str, str | None]:
        """The run's status and what it waits for, from its row."""

        async def read() -> tuple[str, str | None]:
            conn = await asyncpg.connect(_asyncpg_dsn(self.database_url))
            try:
                row = await conn.fetchrow(
                    "SELECT status::text, waiting_for FROM runs WHERE id = $1::uuid", run_id
                )
            finally:
                await conn.close()
            assert row is not None, run_id
            return str(row[0]).upper(), row[1]

        return run_async(read())

    def wait_settled(self, tenant: Tenant, run_id: str, timeout: float = 60) -> str:
        """Waits for the run's nudges (straight from Redis, so it works with the API down) until
        its row is settled; returns the status."""
        return self.wait_run(tenant, run_id, lambda status, _: status in SETTLED, timeout)

    def wait_run(
        self,
        tenant: Tenant,
        run_id: str,
        want: Callable[[str, str | None], bool],
        timeout: float = 60,
    ) -> str:
        """Waits for the run's nudges until `want(status, waiting_for)` holds of its row."""
        redis = Redis.from_url(self.redis_url)
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(f"{channel_prefix(self.redis_url)}{tenant.id}")
        loop_deadline = _Deadline(timeout)
        try:
            while True:
                status, waiting_for = self.run_row(run_id)
                if want(status, waiting_for):
                    return status
                if loop_deadline.passed:
                    raise AssertionError(
                        f"run {run_id} is still {status} ({waiting_for}) after {timeout}s"
                    )
                message = pubsub.get_message(timeout=min(1.0, loop_deadline.left))
                if message is not None:
                    json.loads(message["data"])  # a nudge: read the row again
        finally:
            pubsub.close()
            redis.close()


class _Deadline:
    def __init__(self, seconds: float) -> None:
        import time

        self._time = time.monotonic
        self._end = self._time() + seconds

    @property
    def left(self) -> float:
        return max(0.0, self._end - self._time())

    @property
    def passed(self) -> bool:
        return self.left <= 0


@contextlib.contextmanager
def running_stack(admin_url: str, redis_base: str, workdir: Path) -> Iterator[Stack]:
    stack = Stack(admin_url=admin_url, redis_base=redis_base, workdir=workdir)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()
