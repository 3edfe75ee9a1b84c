"""Every PostgreSQL connection Outlive opens goes to the primary, and follows it.

`DATABASE_URL` may name several hosts (`outlive.urls`): the nodes of one cluster, of which one
is the primary. `connect` tries them in turn, each with a timeout of its own (`CONNECT_TIMEOUT_S`,
as libpq's `connect_timeout` is per host; asyncpg's multi-host connect has one deadline for all,
so one unreachable machine first in the list would make every connect fail), and keeps the
first that is writable. It starts with the host that was the primary last time, so only the
first connection after a failover pays for the old primary's timeout.

"Writable" is what libpq's `target_session_attrs=read-write` means: not in recovery (a standby)
and `default_transaction_read_only` off. It is checked on every connection, whatever the URL
says and whether it names one host or several: behind HAProxy (one host, routed by a health
check that lags) a new connection can land on a standby during a switch, and a relay pass there
failed with "cannot execute SELECT FOR UPDATE in a read-only transaction". PostgreSQL 14 and
later report both settings when the session starts (`in_hot_standby`,
`default_transaction_read_only`), so the check costs no round trip; before 14 (or behind a pooler
that does not pass them on) it is one `SELECT`.

A connection that was writable stays on its node, and a node turns into a standby only by
restarting (Patroni demotes a primary by restarting it), which closes the connection. A node
fenced read-only in place (`default_transaction_read_only` set and reloaded) answers "cannot
execute … in a read-only transaction": `outlive.db.drivers` treats that as a lost connection
(`ServiceUnavailable`; the connection is dropped, and SQLAlchemy's pool with it).

Every caller goes through here: both pools (`outlive.db.engine`, `outlive.db.raw`), the worker's
liveness connection (`outlive.db.liveness`), the relay's and the cancels' LISTEN
(`outlive.jobs.relay`, `outlive.jobs.cancels`), and so `outlive migrate` and every CLI command.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from outlive.urls import PostgresUrl

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # per host: a refused host fails at once, a lost machine after this

# A host that cannot take a connection now: the next one is tried.
_HOST_DOWN = (
    OSError,  # refused, reset, unreachable; TimeoutError (the per-host timeout) is one too
    asyncpg.CannotConnectNowError,  # starting up, in recovery without hot standby, stopping
    asyncpg.PostgresConnectionError,  # closed during the start-up
)


class NoPrimary(ConnectionError):
    """None of the hosts is a writable primary that answers: PostgreSQL cannot be reached
    (`outlive.db.drivers` answers `ServiceUnavailable`)."""


_last_primary: dict[str, int] = {}  # URL → the index of the host that was the primary last


async def connect(url: str, **kwargs: Any) -> asyncpg.Connection:
    """A connection to the primary among the hosts of `url` (asyncpg's keyword arguments pass
    through). Raises the driver's own error when the URL names one host that failed, else
    `NoPrimary` naming what each host answered."""
    target = PostgresUrl.parse(url).without("target_session_attrs")  # checked here instead
    candidates = target.per_host()
    first = _last_primary.get(url, 0) % len(candidates)
    failures: list[tuple[str, BaseException | str]] = []
    kwargs.setdefault("timeout", CONNECT_TIMEOUT_S)
    for index in [*range(first, len(candidates)), *range(first)]:
        candidate = candidates[index]
        try:
            conn = await asyncpg.connect(str(candidate), **kwargs)
        except _HOST_DOWN as exc:
            failures.append((candidate.host_names[0], exc))
            continue
        try:
            writable = await is_writable(conn)
        except BaseException:
            conn.terminate()
            raise
        if writable:
            if index != first:
                log.info("PostgreSQL: the primary is now %s", candidate.host_names[0])
            _last_primary[url] = index
            return conn
        conn.terminate()
        failures.append((candidate.host_names[0], "read-only (a standby, or fenced)"))
    raise _no_primary(failures)


def _no_primary(failures: list[tuple[str, BaseException | str]]) -> BaseException:
    last = failures[-1][1]
    if len(failures) == 1 and isinstance(last, Exception) and not isinstance(last, TimeoutError):
        return last  # one host: the driver's own words, as always
    said = "; ".join(f"{host}: {_said(what)}" for host, what in failures)
    error = NoPrimary(f"no writable primary among the hosts ({said})")
    if isinstance(last, BaseException):
        error.__cause__ = last
    return error


def _said(what: BaseException | str) -> str:
    return what if isinstance(what, str) else repr(what)


async def is_writable(conn: asyncpg.Connection) -> bool:
    """libpq's `read-write`: not a standby, and not read-only by default."""
    settings = conn.get_settings()
    standby = getattr(settings, "in_hot_standby", None)
    read_only = getattr(settings, "default_transaction_read_only", None)
    if standby is None or read_only is None:  # not reported at start-up: ask
        row = await conn.fetchrow(
            "SELECT pg_catalog.pg_is_in_recovery() AS standby,"
            " pg_catalog.current_setting('default_transaction_read_only') AS read_only"
        )
        standby, read_only = ("on" if row["standby"] else "off"), row["read_only"]
    return bool(standby == "off" and read_only == "off")
