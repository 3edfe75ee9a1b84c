"""Process liveness behind PgBouncer in transaction mode (docs/liveness.md): the liveness lock
is held on a direct connection (`OUTLIVE_DB_LIVENESS_URL`), never through PgBouncer, and the
check made through PgBouncer (a claim, the relay) sees a live holder as alive and a gone one as
gone."""

from __future__ import annotations

import asyncpg
import pytest

from outlive.config import Settings
from outlive.db.liveness import Liveness, worker_gone
from outlive.runtime import open_runtime
from tests.support import Servers

pytestmark = pytest.mark.timeout(120)

GONE = f"SELECT {worker_gone('CAST($1 AS integer)')}"


def test_behind_pgbouncer_the_liveness_connection_goes_to_the_server_itself(
    bounced: Settings, servers: Servers
) -> None:
    assert bounced.liveness_url() is None  # no direct URL: no liveness, the lease alone
    direct = bounced.model_copy(update={"db_liveness_url": servers.database_url})
    assert direct.liveness_url() == servers.database_url
    plain = bounced.model_copy(update={"db_pgbouncer": False})
    assert plain.liveness_url() == bounced.database_url


async def test_a_worker_behind_pgbouncer_holds_its_lock_on_the_direct_connection(
    bounced: Settings, servers: Servers
) -> None:
    assert bounced.database_url is not None
    settings = bounced.model_copy(update={"db_liveness_url": servers.database_url})
    through = await asyncpg.connect(bounced.database_url, statement_cache_size=0)
    try:
        async with open_runtime(settings, "worker") as runtime:
            assert runtime.liveness is not None
            key = runtime.liveness.worker_id
            assert key is not None
            assert await through.fetchval(GONE, key) is False  # alive, seen through PgBouncer
        assert await through.fetchval(GONE, key) is True  # the runtime closed: gone at once
        async with open_runtime(bounced, "worker") as runtime:
            assert runtime.liveness is None  # no direct URL: the lease alone decides
    finally:
        await through.close()


async def test_a_lock_taken_through_pgbouncer_would_not_mean_liveness(
    bounced: Settings,
) -> None:
    """Why the lock must not go through PgBouncer: its session ends when PgBouncer's does, not
    when the worker's does, so a dead worker would look alive (the safe side, but no faster)."""
    assert bounced.database_url is not None
    liveness = Liveness(bounced.database_url)
    await liveness.start()
    key = liveness.worker_id
    assert key is not None
    connection = liveness._conn
    assert connection is not None
    connection.terminate()  # the worker's end is gone; PgBouncer keeps the server session
    through = await asyncpg.connect(bounced.database_url, statement_cache_size=0)
    try:
        assert await through.fetchval(GONE, key) is False  # still "alive": the server kept it
    finally:
        await through.close()
        await liveness.stop()
