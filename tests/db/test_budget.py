"""The connection budget: each pool is sized by its setting; behind PgBouncer in transaction mode
(no prepared statements across server connections), OUTLIVE_DB_PGBOUNCER=1 makes everything work.

The PgBouncer test starts Debian's `pgbouncer` (apt-get install -y pgbouncer; CI installs it) on a
free port in transaction mode with `max_prepared_statements = 0`, in front of the test database.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from outlive.config import Settings
from outlive.runtime import open_runtime
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

pytestmark = pytest.mark.timeout(180)

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


async def test_each_pool_is_sized_by_its_setting(servers: Servers) -> None:
    settings = make_settings(servers, db_pool_size=2, db_max_overflow=1, db_raw_pool_size=3)
    assert settings.database_url is not None
    async with open_runtime(settings, "worker") as runtime:
        engine, sessions = runtime.engine, runtime.sessions
        pool: Any = engine.sync_engine.pool
        assert (pool.size(), pool._max_overflow) == (2, 1)
        assert sessions.raw is not None
        assert sessions.raw.get_max_size() == 3
        held = [await engine.connect() for _ in range(3)]  # size + overflow: all there is
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await engine.connect()
        for conn in held:
            await conn.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def pgbouncer(database_url: str) -> Iterator[str]:
    """PgBouncer in transaction mode in front of `database_url`; yields the URL through it."""
    if not Path(PGBOUNCER).is_file():
        if os.environ.get("OUTLIVE_REQUIRE_PGBOUNCER") == "1":  # CI: it must run
            pytest.fail("pgbouncer is not installed (apt-get install -y pgbouncer)")
        pytest.skip("pgbouncer is not installed (apt-get install -y pgbouncer)")
    url = make_url(database_url)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="outlive-pgbouncer-") as directory:
        folder = Path(directory)
        folder.chmod(0o755)
        (folder / "users.txt").write_text(f'"{url.username}" ""\n')
        (folder / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={url.host or "127.0.0.1"} port={url.port or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = transaction
{_no_prepared_statements()}default_pool_size = 4
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
"""
        )
        for name in ("users.txt", "pgbouncer.ini"):
            (folder / name).chmod(0o644)
        user = ["-u", "nobody"] if os.geteuid() == 0 else []  # it refuses to run as root
        process = subprocess.Popen(
            [PGBOUNCER, *user, str(folder / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_listening(port, process)
            yield url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        finally:
            process.terminate()
            process.wait(10)
            if process.stderr is not None:
                process.stderr.close()


def _no_prepared_statements() -> str:
    """PgBouncer 1.21+ can carry prepared statements across server connections: turned off
    here, to check the setting against the stricter (and older) behaviour."""
    import re

    out = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"(\d+)\.(\d+)", out.stdout)
    if found and (int(found.group(1)), int(found.group(2))) >= (1, 21):
        return "max_prepared_statements = 0\n"
    return ""


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"pgbouncer exited: {process.stderr.read() if process.stderr else ''!r}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)  # a child process starting: there is no event to await
    raise AssertionError("pgbouncer never listened")


@pytest.fixture
async def bounced(servers: Servers) -> AsyncIterator[Settings]:
    with pgbouncer(servers.database_url) as url:
        yield make_settings(servers, database_url=url, db_pgbouncer=True)


async def test_everything_works_behind_pgbouncer_in_transaction_mode(
    bounced: Settings, sessions: Any, tenant: TenantHandle
) -> None:
    assert bounced.redis_url is not None
    async with Api.running(bounced) as api, NudgeWatch(bounced.redis_url, sessions, tenant.id) as w:
        host = WorkerHost(bounced, concurrency=8)
        await host.start()
        try:
            # concurrent single statements (raw pool), transactions and reads (sessions)
            started = await asyncio.gather(
                *(
                    api.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0})
                    for _ in range(4)
                ),
                *(
                    api.gql("{ runs(first: 5) { edges { cursor } } }", token=tenant.token)
                    for _ in range(8)
                ),
            )
            run_id = started[0]["run"]["id"]
            run = await w.until(run_id, settled)
            listed = await api.gql(
                "{ runs(first: 50) { edges { node { id status } } } }", token=tenant.token
            )
            usage = await api.gql("{ usage(days: 1) { count } }", token=tenant.token)
        finally:
            await host.stop()
    assert run.status.value == "SUCCEEDED"
    assert any(e["node"]["id"] == run_id for e in listed["runs"]["edges"])
    assert sum(u["count"] for u in usage["usage"]) >= 1


async def test_without_the_setting_pgbouncer_breaks_prepared_statements(
    bounced: Settings,
) -> None:
    """The check behind the setting: asyncpg's default statement cache fails through it."""
    assert bounced.database_url is not None
    pool = await asyncpg.create_pool(bounced.database_url, min_size=4, max_size=8)
    failures = 0

    async def one(i: int) -> None:
        nonlocal failures
        try:
            await pool.fetchval("SELECT $1::int + 1", i)
        except asyncpg.PostgresError:
            failures += 1

    try:
        await asyncio.gather(*(one(i) for i in range(200)))
    finally:
        await pool.close()
    assert failures > 0
