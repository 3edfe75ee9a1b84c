"""Process liveness in PostgreSQL: a worker process's mark of life is a session it holds.

Each worker process opens one connection of its own (outside every pool, and never through
PgBouncer in transaction mode, where a session-level lock would stay on a server connection that
other clients then share) and takes a session-level advisory lock on a random key, its
`worker_id`. PostgreSQL holds that lock for exactly as long as the session lives: when the
process dies (SIGKILL, OOM, a crash), the kernel closes its socket, the server ends the session
and the lock is free within milliseconds. A claim records the claimer's `worker_id` on the run
(`runs.worker_id`), so "the process holding this run is gone" is one question PostgreSQL answers
by itself: is that key's lock still granted (`WORKER_GONE`)?

`pg_locks` is read, rather than trying to take the lock (`pg_try_advisory_xact_lock`): reading
cannot be fooled by the reader's own session (advisory locks are re-entrant: a session that
happens to hold the key would "take" it and conclude that a live holder is gone), nor by a
session-level lock left on a PgBouncer server connection (which makes a dead holder look alive:
the safe side, where the lease decides as before). A frozen process (SIGSTOP) keeps its socket
and so its lock: the lease still decides for it, and for a partition or a lost machine (until the
server's TCP keepalive ends the session).

When the liveness connection is lost while the process lives (PostgreSQL restarted), `worker_id`
is None until it is open again: claims made meanwhile record no holder (the lease alone decides),
and the runs it held may be taken over at once by other workers; their writes are fenced on the
attempt, so this attempt's next write finds the run taken and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

import asyncpg

from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

LOCK_CLASS = 0x4F4C  # the first key of Outlive's liveness locks ("OL"); the worker id the second
REOPEN_S = 1.0  # how often a lost liveness connection is tried again
APPLICATION_NAME = "outlive-liveness"


def worker_gone(column: str) -> str:
    """SQL: the worker process whose liveness key is `column` no longer holds its lock (its
    session ended). False for NULL (no holder recorded): the lease decides."""
    return (
        f"({column} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks l"  # noqa: S608 (constants)
        f" WHERE l.locktype = 'advisory' AND l.classid = {LOCK_CLASS}"
        f" AND l.objid = CAST({column} AS oid) AND l.objsubid = 2 AND l.granted"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))"
    )


class Liveness:
    """One worker process's liveness lock, on a connection of its own (`url`); `start()` takes
    it, `stop()` lets it go (the process's runs are free for others at once)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: asyncpg.Connection | None = None
        self._key: int | None = None
        self._held = False
        self._daemon = Daemon("outlive-liveness", self._keep)

    @property
    def worker_id(self) -> int | None:
        """The key this process holds, or None while it holds none (the lease alone decides)."""
        return self._key if self._held else None

    async def start(self) -> None:
        """Take the lock (raises when PostgreSQL cannot be reached), then keep it: a lost
        connection is opened again every `REOPEN_S`."""
        await self._open()
        self._daemon.start()

    async def stop(self) -> None:
        await self._daemon.stop()
        self._held = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
            self._conn = None

    async def _open(self) -> None:
        conn = await asyncpg.connect(
            self._url,
            statement_cache_size=0,
            server_settings={"application_name": APPLICATION_NAME},
        )
        try:
            key = self._key or _new_key()
            while not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, key):
                key = _new_key()  # taken by a live process: another key (random: rare)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._lost)
        self._conn, self._key, self._held = conn, key, True
        log.info("liveness: this worker holds its lock (worker id %d)", key)

    def _lost(self, *_: Any) -> None:
        if self._held:
            log.warning("liveness: the connection was lost; the lease alone decides until back")
        self._held = False

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(REOPEN_S)
            if self._conn is not None and not self._conn.is_closed():
                continue
            self._held = False
            try:
                await self._open()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.debug("liveness: cannot reopen yet (%r)", exc)


def _new_key() -> int:
    return secrets.randbelow(2**31 - 2) + 1  # a positive int4: `runs.worker_id`, an oid in pg_locks
