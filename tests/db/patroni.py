"""A PostgreSQL HA cluster of the tests' own: etcd, two PostgreSQL nodes under Patroni in
synchronous mode, and HAProxy in front routing to the leader, all on free ports under one
temporary directory, stopped and removed afterwards.

Debian's `patroni`, `etcd-server` and `haproxy` (`.ci/run` installs them as it installs
Chromium): without them the tests skip, unless `OUTLIVE_REQUIRE_PATRONI=1` (CI) makes that a
failure. PostgreSQL refuses to run as root, so as root Patroni (and its PostgreSQL) runs as the
`postgres` user. Each node's PostgreSQL runs with `fsync=off`: a killed process loses nothing the
kernel has, which is all these tests kill, and it spares the shared disk.

`primary_start_timeout: 0` makes Patroni fail over when the primary's postmaster dies, instead
of restarting it in place (that is `tests/db/test_postgres_restart.py`); with `loop_wait: 1` it
notices within a second. The old primary comes back as a standby (`pg_rewind`), so a cluster
can fail over again and again (`OUTLIVE_FAILOVER_ROUNDS`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.faults import free_port

T = TypeVar("T")

BINARIES = ("patroni", "patronictl", "etcd", "haproxy")
PG_BIN = next(
    (p for v in ("15", "16", "17", "14") if (p := Path(f"/usr/lib/postgresql/{v}/bin")).is_dir()),
    Path("/usr/lib/postgresql/15/bin"),
)
INSTALL = "apt-get install -y patroni etcd-server haproxy postgresql"


def binary(name: str) -> str | None:
    """On PATH, or where Debian puts it (`/usr/sbin` is not on every user's PATH)."""
    found = shutil.which(name)
    if found is None and Path(f"/usr/sbin/{name}").exists():
        found = f"/usr/sbin/{name}"
    return found


def require_patroni() -> None:
    """Skip (or, with OUTLIVE_REQUIRE_PATRONI=1, fail) when a binary is missing."""
    missing = [b for b in BINARIES if binary(b) is None]
    if not (PG_BIN / "postgres").exists():
        missing.append(str(PG_BIN / "postgres"))
    if missing:
        message = f"{', '.join(missing)} not installed ({INSTALL})"
        if os.environ.get("OUTLIVE_REQUIRE_PATRONI") == "1":  # CI: it must run
            pytest.fail(message)
        pytest.skip(message)


def until(check: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """Processes starting, a leader elected: none of it announces itself; look every 50 ms."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(0.05)


@dataclass
class Node:
    name: str
    pg_port: int
    rest_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        return self.directory / "patroni.yml"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.pg_port}"

    def postmaster_pid(self) -> int | None:
        pid_file = self.directory / "data" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(pid_file.read_text().splitlines()[0])
        return None

    def rest(self, path: str, timeout: float = 1.0) -> tuple[int, Any]:
        """Patroni's REST API: (status, JSON); (0, None) when it does not answer."""
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, None
        except (OSError, ValueError):
            return 0, None


class PatroniCluster:
    """Two nodes (`pg0`, `pg1`), etcd, HAProxy. `hosts_url` names both nodes (a multi-host
    `DATABASE_URL`); `haproxy_url` goes through HAProxy, which routes to the leader by Patroni's
    health check."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.scope = f"outlive-{secrets.token_hex(4)}"
        self.user = "postgres" if os.geteuid() == 0 else None
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.haproxy_port = free_port()
        self.nodes = [Node(f"pg{i}", free_port(), free_port(), root / f"pg{i}") for i in range(2)]
        self._others: list[subprocess.Popen[bytes]] = []  # etcd, HAProxy

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[PatroniCluster]:
        """The whole cluster, with a database `outlive` migrated by `outlive migrate` through the
        multi-host URL; every process stopped (and killed if it lingers) on the way out."""
        require_patroni()
        root = Path(tempfile.mkdtemp(prefix="outlive-patroni-"))
        cluster = cls(root)
        try:
            cluster._start()
            yield cluster
        finally:
            cluster._stop()
            shutil.rmtree(root, ignore_errors=True)

    def url(self, *, via: str, database: str = "outlive") -> str:
        if via == "haproxy":
            return f"postgresql://postgres@127.0.0.1:{self.haproxy_port}/{database}"
        hosts = ",".join(node.address for node in self.nodes)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    @property
    def hosts_url(self) -> str:
        return self.url(via="hosts")

    @property
    def haproxy_url(self) -> str:
        return self.url(via="haproxy")

    # --- what a test does to it ---------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            status, body = node.rest("/cluster")
            if status == 200 and body:
                return list(body.get("members", []))
        return []

    def leader(self) -> Node | None:
        """The node that is the running primary, by Patroni."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return self.node(member["name"])
        return None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def other(self, node: Node) -> Node:
        return next(n for n in self.nodes if n is not node)

    def healthy(self) -> Node | None:
        """The leader, once the other node streams from it as its synchronous standby."""
        members = self.members()
        leader = next((m for m in members if m.get("role") == "leader"), None)
        standby = next((m for m in members if m.get("role") == "sync_standby"), None)
        if leader is None or standby is None or leader.get("state") != "running":
            return None
        if standby.get("state") not in ("running", "streaming") or standby.get("lag") not in (
            0,
            "0",
        ):
            return None
        return self.node(leader["name"])

    def until_healthy(self, timeout: float = 90.0) -> Node:
        return until(self.healthy, "a leader with a streaming synchronous standby", timeout)

    def kill_postmaster(self, node: Node) -> None:
        """SIGKILL the node's postmaster (its backends die with it); Patroni lives on and, with
        `primary_start_timeout: 0`, hands the leadership to the standby."""
        pid = node.postmaster_pid()
        assert pid is not None, f"{node.name} runs no postmaster"
        os.kill(pid, signal.SIGKILL)

    def switchover(self, to: Node) -> subprocess.CompletedProcess[str]:
        """A planned switchover with `patronictl`, to `to` (now)."""
        leader = self.other(to)
        return subprocess.run(
            [
                "patronictl",
                *("-c", str(leader.config)),
                "switchover",
                *("--leader", leader.name, "--candidate", to.name, "--force"),
                self.scope,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            env=self._env(),
        )

    def is_primary(self, node: Node) -> bool:
        """Patroni's own health check (what HAProxy asks): this node is the writable leader."""
        return node.rest("/primary", timeout=0.5)[0] == 200

    # --- starting and stopping ------------------------------------------------------------

    def _start(self) -> None:
        if self.user is not None:
            shutil.chown(self.root, self.user, self.user)
        self._start_etcd()
        for node in self.nodes:
            node.directory.mkdir()
            if self.user is not None:
                shutil.chown(node.directory, self.user, self.user)
            node.config.write_text(self._patroni_config(node))
            node.process = self._spawn(
                ["patroni", str(node.config)], node.directory / "patroni.log", as_postgres=True
            )
            if node is self.nodes[0]:
                until(self.leader, "pg0 bootstrapped as the leader", 120)
        leader = self.until_healthy(120)
        self._start_haproxy()
        until(lambda: _answers(self.haproxy_port, leader), "HAProxy routing to the leader", 30)
        self._create_database()

    def _stop(self) -> None:
        for process in self._others:
            _end(process)
        for node in self.nodes:
            if node.process is not None:
                _end(node.process, grace=20)  # Patroni stops its PostgreSQL
            pid = node.postmaster_pid()
            if pid is not None:  # a postmaster Patroni left behind
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{PG_BIN}:{os.environ.get('PATH', '')}"}

    def _spawn(
        self, args: list[str], log: Path, *, as_postgres: bool = False
    ) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self.user if as_postgres else None,
                cwd=self.root,
                env=self._env(),
                start_new_session=True,  # its own process group: stopped with its children
            )

    def _start_etcd(self) -> None:
        client, peer = (
            f"http://127.0.0.1:{self.etcd_port}",
            f"http://127.0.0.1:{self.etcd_peer_port}",
        )
        process = self._spawn(
            [
                "etcd",
                *("--name", "etcd0", "--data-dir", str(self.root / "etcd")),
                *("--listen-client-urls", client, "--advertise-client-urls", client),
                *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
                *("--initial-cluster", f"etcd0={peer}", "--enable-v2=true"),
                *("--heartbeat-interval", "100", "--election-timeout", "1000"),
            ],
            self.root / "etcd.log",
        )
        self._others.append(process)
        until(lambda: _http_ok(f"{client}/health"), "etcd answering", 30)

    def _start_haproxy(self) -> None:
        servers = "\n".join(
            f"    server {n.name} {n.address} check port {n.rest_port}" for n in self.nodes
        )
        config = self.root / "haproxy.cfg"
        config.write_text(
            f"""global
    maxconn 1000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 1s
listen primary
    bind 127.0.0.1:{self.haproxy_port}
    option httpchk GET /primary
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
{servers}
"""
        )
        self._others.append(
            self._spawn(["haproxy", "-db", "-f", str(config)], self.root / "haproxy.log")
        )

    def _patroni_config(self, node: Node) -> str:
        hba = [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        config = {
            "scope": self.scope,
            "name": node.name,
            "restapi": {
                "listen": f"127.0.0.1:{node.rest_port}",
                "connect_address": f"127.0.0.1:{node.rest_port}",
            },
            "etcd": {"host": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": 10,
                    "loop_wait": 1,
                    "retry_timeout": 3,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "primary_start_timeout": 0,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_log_hints": "on",
                            "max_connections": 300,
                            "fsync": "off",
                            "wal_keep_size": "256MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
                "pg_hba": hba,
            },
            "postgresql": {
                "listen": node.address,
                "connect_address": node.address,
                "data_dir": str(node.directory / "data"),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.directory / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                },
                "parameters": {"unix_socket_directories": str(node.directory)},
                "pg_hba": hba,
            },
        }
        return json.dumps(config, indent=2)  # YAML is a superset of JSON

    def _create_database(self) -> None:
        admin = self.url(via="hosts", database="postgres")
        script = (
            "import asyncio, asyncpg, sys\n"
            "async def main():\n"
            "    c = await asyncpg.connect(sys.argv[1])\n"
            "    await c.execute('CREATE DATABASE outlive')\n"
            "    await c.close()\n"
            "asyncio.run(main())\n"
        )
        subprocess.run([sys.executable, "-c", script, admin], check=True, timeout=60)
        done = subprocess.run(  # through the multi-host URL: what died with a ValueError
            [sys.executable, "-m", "outlive.cli", "migrate"],
            env={**os.environ, "DATABASE_URL": self.hosts_url},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def _http_ok(url: str) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(url, timeout=1) as response,  # noqa: S310 (loopback)
    ):
        return bool(response.status == 200)
    return False


def _answers(port: int, leader: Node) -> bool:
    """A connection through HAProxy reaches `leader` (the server's port is its own)."""
    script = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        "    c = await asyncpg.connect(sys.argv[1], timeout=2)\n"
        "    print(await c.fetchval('SELECT inet_server_port()'))\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    done = subprocess.run(
        [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=30, check=False
    )
    return done.returncode == 0 and done.stdout.strip() == str(leader.pg_port)


def _end(process: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM its process group, SIGKILL what is left after `grace`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)
