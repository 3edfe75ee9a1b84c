"""The embedded servers of `outlive dev` stop when their block ends: nothing is left running."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from outlive.embedded import embedded_redis


def test_the_embedded_redis_stops_when_its_block_ends(tmp_path: Path) -> None:
    with embedded_redis(tmp_path / "redis") as url:
        client = redis.Redis(
            unix_socket_path=url.removeprefix("unix://"), retry=Retry(NoBackoff(), 0)
        )
        assert client.ping()
    client.connection_pool.disconnect()
    with pytest.raises(redis.ConnectionError):
        client.ping()
