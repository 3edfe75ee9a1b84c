"""The tests of Outlive on a Redis Cluster of their own: 3 masters and 3 replicas
(`tests.redis_cluster`), started once for the directory, emptied before each test."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlive.config import Settings
from tests.conftest import make_settings
from tests.redis_cluster import MISSING, TOOLS, RedisClusterNodes
from tests.support import Servers


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    if TOOLS is None:
        pytest.skip(MISSING)
    with tempfile.TemporaryDirectory(prefix="outlive-cluster-") as directory:
        nodes = RedisClusterNodes.start(Path(directory))
        try:
            yield nodes
        finally:
            nodes.stop()


@pytest.fixture
def cluster(redis_cluster: RedisClusterNodes) -> RedisClusterNodes:
    """The cluster, every master emptied (and every node up: a test may have killed one)."""
    if (
        len(redis_cluster.live_ports()) < len(redis_cluster.ports)
        or len(redis_cluster.master_ports()) != redis_cluster.masters
    ):
        redis_cluster.restart_empty()
    redis_cluster.flush()
    return redis_cluster


@pytest.fixture
def settings(servers: Servers, cluster: RedisClusterNodes) -> Settings:
    return make_settings(servers, redis_url=cluster.url)
