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

When the liveness connection is lost while the process lives, `worker_id` is None until it is
open again: claims made meanwhile record no holder (the lease alone decides), and the runs it
held may be taken over at once by other workers; their writes are fenced on the attempt, so this
attempt's next write finds the run taken and stops.

A lock is evidence only on the server it was taken on (`taken_here`): a restart, a crash or a
failover to a standby loses every lock while every worker lives. Each worker records where it
took its lock (`liveness_locks`, UNLOGGED, with the server's start time) when it takes it, and a
free lock means "gone" only when that record names the server's current life. Until a live
worker has reconnected and taken its lock again, its runs are left to their lease
(docs/liveness.md, "Across a restart or a failover").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

import asyncpg

from outlive.db import primary
from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

LOCK_CLASS = 0x4F4C  # the first key of Outlive's liveness locks ("OL"); the worker id the second
REOPEN_S = 1.0  # how often a lost liveness connection is tried again
APPLICATION_NAME = "outlive-liveness"
# While the liveness session waits for another worker's lock (`DeathWatch`), its server process
# is busy and would not notice this process dying: PostgreSQL reads a busy session's socket only
# every `client_connection_check_interval` (14 and later; off by default). Without it, a killed
# worker's session would live on, its lock held, for as long as the worker it watched lives.
CHECK_INTERVAL = "50ms"


def worker_gone(column: str) -> str:
    """SQL: the worker process whose liveness key is `column` no longer holds its lock (its
    session ended), on the server where it took it (`taken_here`). False for NULL (no holder
    recorded), and for a holder that has not taken its lock on this server's current life yet
    (a restart or a failover lost every lock, and it is reconnecting): the lease decides."""
    return (
        f"({column} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks l"  # noqa: S608 (constants)
        f" WHERE l.locktype = 'advisory' AND l.classid = {LOCK_CLASS}"
        f" AND l.objid = CAST({column} AS oid) AND l.objsubid = 2 AND l.granted"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
        f" AND {taken_here(column)})"
    )


def taken_here(column: str) -> str:
    """SQL: the worker whose key is `column` took its liveness lock on this server, since it
    last started (`liveness_locks`, written by `Liveness` as it takes the lock). Advisory locks
    live in one server's memory: after a failover the new primary holds none, and a free lock
    there says nothing of its holder until that holder has taken it there once."""
    return (
        f"EXISTS (SELECT 1 FROM liveness_locks k WHERE k.worker_id = {column}"  # noqa: S608
        " AND k.server_started_at = pg_postmaster_start_time())"
    )


# A RUNNING run whose worker process is gone: its liveness lock is free, on the server where it
# took it (`taken_here`). One probe of `ix_runs_running` and one read of pg_locks (a hashed
# subplan), whatever the number of runs; `liveness_locks` is read only for a run whose lock is
# free. The relay's look (`services.relay.queries.ORPHANED`) and a lone worker's (`DeathWatch`).
ORPHANED_RUNS = (
    "status = 'RUNNING' AND worker_id IS NOT NULL"  # noqa: S608 (constants)
    " AND worker_id NOT IN (SELECT CAST(l.objid AS bigint) FROM pg_locks l"
    f" WHERE l.locktype = 'advisory' AND l.classid = {LOCK_CLASS} AND l.objsubid = 2"
    " AND l.granted AND l.database = (SELECT oid FROM pg_database"
    f" WHERE datname = current_database())) AND {taken_here('runs.worker_id')}"
)


# Taking the lock is recorded with the server's start time (`taken_here`), and the records that
# can no longer decide anything go: those of another server life, and those of gone workers that
# hold no RUNNING run. One statement, when a worker takes its lock (at start, after a reconnect).
_HELD = (
    "SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory'"  # noqa: S608 (constants)
    f" AND l.classid = {LOCK_CLASS} AND l.objid = CAST(k.worker_id AS oid) AND l.objsubid = 2"
    " AND l.granted AND l.database = (SELECT oid FROM pg_database"
    " WHERE datname = current_database())"
)
_TAKEN = f"""WITH pruned AS (
    DELETE FROM liveness_locks k WHERE k.worker_id <> $1
       AND (k.server_started_at <> pg_postmaster_start_time()
            OR (NOT EXISTS ({_HELD}) AND NOT EXISTS (SELECT 1 FROM runs r
                WHERE r.status = 'RUNNING' AND r.worker_id = k.worker_id))))
INSERT INTO liveness_locks (worker_id, server_started_at)
VALUES ($1, pg_postmaster_start_time())
ON CONFLICT (worker_id) DO UPDATE
SET server_started_at = EXCLUDED.server_started_at, taken_at = now()"""  # noqa: S608 (constants)


class Liveness:
    """One worker process's liveness lock, on a connection of its own (`url`); `start()` takes
    it, `stop()` lets it go (the process's runs are free for others at once)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: asyncpg.Connection | None = None
        self._key: int | None = None
        self._held = False
        self.watchable = False  # the session can wait for another worker's lock (`DeathWatch`)
        self._gone = asyncio.Event()  # the connection was lost: `_keep` opens it again
        self._daemon = Daemon("outlive-liveness", self._keep)

    @property
    def worker_id(self) -> int | None:
        """The key this process holds, or None while it holds none (the lease alone decides)."""
        return self._key if self._held else None

    @property
    def connection(self) -> asyncpg.Connection | None:
        """The liveness session while it holds the lock and notices its client's death while
        busy (`DeathWatch` waits on it)."""
        return self._conn if self._held and self.watchable else None

    def watch(self) -> DeathWatch:
        """A watch on the other workers' liveness (`DeathWatch`), on this session."""
        return DeathWatch(self)

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
        settings = {"application_name": APPLICATION_NAME}
        try:
            # Its statements are prepared once (asyncpg's statement cache): uncached, each look
            # was two round trips (parse, then bind and execute), twice a second per cell.
            conn = await primary.connect(
                self._url,
                server_settings=settings | {"client_connection_check_interval": CHECK_INTERVAL},
            )
            self.watchable = True
        except (asyncpg.UndefinedObjectError, asyncpg.ProtocolViolationError):
            # PostgreSQL before 14, or a pooler in between that refuses the setting: no watch,
            # the periodic look alone
            conn = await primary.connect(self._url, server_settings=settings)
            self.watchable = False
        try:
            key = self._key or _new_key()
            while not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, key):
                key = _new_key()  # taken by a live process: another key (random: rare)
            await conn.execute(_TAKEN, key)  # on this server's current life (`taken_here`)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._lost)
        self._conn, self._key, self._held = conn, key, True
        self._gone.clear()
        log.info("liveness: this worker holds its lock (worker id %d)", key)

    def _lost(self, conn: asyncpg.Connection, *_: Any) -> None:
        if conn is not self._conn:  # one lost before, already replaced
            return
        if self._held:
            log.warning("liveness: the connection was lost; the lease alone decides until back")
        self._held = False
        self._gone.set()

    async def _keep(self) -> None:
        """Once the connection is lost (its termination listener: an event, not a look every
        second, which woke every cell's worker for nothing), open it again every `REOPEN_S`."""
        while True:
            await self._gone.wait()
            await asyncio.sleep(REOPEN_S)
            try:  # clears `_gone` once open
                await self._open()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.debug("liveness: cannot reopen yet (%r)", exc)


def _new_key() -> int:
    return secrets.randbelow(2**31 - 2) + 1  # a positive int4: `runs.worker_id`, an oid in pg_locks


# The other live workers' keys, and whether a gone worker left a RUNNING run: one look.
_LOOK = (
    "SELECT ARRAY(SELECT CAST(objid AS bigint) FROM pg_locks WHERE locktype = 'advisory'"  # noqa: S608 (constants)
    f" AND classid = {LOCK_CLASS} AND objsubid = 2 AND granted AND pid <> pg_backend_pid()"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
    f" AS keys, EXISTS (SELECT 1 FROM runs WHERE {ORPHANED_RUNS}) AS orphaned"
)


class DeathWatch:
    """Learns of another worker's death the moment PostgreSQL does, so that its runs are taken
    over without waiting for the next look (`OUTLIVE_LIVENESS_CHECK_S`).

    On the liveness session itself (idle once its lock is taken, so no connection more), it
    waits to take one other worker's liveness lock (`pg_advisory_lock`): the wait ends when that
    worker's session ends. The workers watch each other in a ring (each the live key after its
    own, wrapping), so with two or more workers each one is watched by one other. The lock is
    let go at once (held, it would make the dead worker look alive to `worker_gone`), and the
    next key is watched. The ring is chosen again every `RECHOOSE_S`, so a worker that joined is
    watched too; until then, and while the liveness session is down, the periodic look alone
    finds a gone worker's runs, as before.

    Alone (no other live worker's lock at the last look for one), `death` returns only once the
    next look for a neighbour was made, every `ALONE_S`, not every `within`. That look also asks
    whether a gone worker left a RUNNING run (one that joined after the last look and died
    before this one): when none did, `may_have_orphans` says so, and the relay makes no look of
    its own. An alone worker's looks cost one statement a second, not two or three
    (bench/cells.py: every cell with one worker paid them)."""

    RECHOOSE_S = 10.0
    ALONE_S = 1.0  # with no other worker to watch, how often to look for one

    def __init__(self, own: Liveness) -> None:
        self._own = own
        self._wait: asyncio.Task[int] | None = None
        self._watched: int | None = None
        self._chosen_at = 0.0
        self._none_gone = False  # the look `death` just made, alone, saw no gone worker's run

    def may_have_orphans(self) -> bool:
        """Whether a gone worker may have left a RUNNING run: False only right after `death`
        returned on a look, alone, that saw none (the relay's own look would find none)."""
        return not self._none_gone

    async def death(self, within: float) -> bool:
        """Wait up to `within` seconds for a watched worker to die: True when one did."""
        loop = asyncio.get_running_loop()
        self._none_gone = False
        try:
            if self._wait is not None and loop.time() - self._chosen_at > self.RECHOOSE_S:
                await self.stop()
            if self._wait is None and loop.time() - self._chosen_at >= self.ALONE_S:
                await self._look()  # not on every look when alone
            if self._wait is None:  # alone: the next look for a neighbour, when it is due
                await asyncio.sleep(max(0.0, self._chosen_at + self.ALONE_S - loop.time()))
                await self._look()
                return False
            done, _ = await asyncio.wait({self._wait}, timeout=within)
            if not done:
                return False
            key, self._wait = self._wait.result(), None
            await self._let_go(key)
            log.info("liveness: worker %d is gone", key)
            return True
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.debug("liveness: cannot watch the other workers (%r)", exc)
            self._wait = None
            await asyncio.sleep(min(within, self.ALONE_S))
            return False

    async def stop(self) -> None:
        """Stop waiting (asyncpg cancels the statement); a lock taken meanwhile is let go."""
        wait, self._wait = self._wait, None
        if wait is None:
            return
        wait.cancel()
        await asyncio.wait({wait})
        if not wait.cancelled() and wait.exception() is None:
            with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                await self._let_go(wait.result())

    async def _look(self) -> None:
        """Look for a neighbour to watch, and for a gone worker's runs (`_LOOK`)."""
        self._wait, orphaned = await self._watch_next()
        self._chosen_at = asyncio.get_running_loop().time()
        self._none_gone = self._wait is None and orphaned is False

    async def _watch_next(self) -> tuple[asyncio.Task[int] | None, bool | None]:
        """Start waiting for the live key after this worker's own (None: no other worker), and
        whether a gone worker left a RUNNING run (None: no look was made)."""
        own, conn = self._own.worker_id, self._own.connection
        if own is None or conn is None:
            return None, None
        row = await conn.fetchrow(_LOOK)
        assert row is not None  # noqa: S101 (a SELECT of two values: always one row)
        keys = sorted({int(k) for k in row["keys"]} - {own})
        if not keys:
            return None, bool(row["orphaned"])
        key = next((k for k in keys if k > own), keys[0])
        if key != self._watched:
            log.info("liveness: watching worker %d", key)
            self._watched = key

        async def taken() -> int:
            await conn.execute("SELECT pg_advisory_lock($1, $2)", LOCK_CLASS, key)
            return key

        return asyncio.create_task(taken(), name="outlive-liveness-watch"), bool(row["orphaned"])

    async def _let_go(self, key: int) -> None:
        conn = self._own.connection
        if conn is not None:
            await conn.execute("SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, key)
