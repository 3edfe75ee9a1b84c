"""PgBouncer in transaction mode, for the tests that check `OUTLIVE_DB_PGBOUNCER`.

Debian's `pgbouncer` (apt-get install -y pgbouncer; CI installs it) runs on a free port in
transaction mode with `max_prepared_statements = 0`, in front of the test database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from outlive.config import Settings
from tests.conftest import make_settings
from tests.support import Servers

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


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
