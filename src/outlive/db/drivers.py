"""The two drivers a `Db` (`outlive.db.tx`) chooses between, and nothing else chooses.

A prepared `Statement` runs on asyncpg directly (a pool or one of its connections) when no
transaction is open; inside a transaction, it (or any SQLAlchemy statement) runs through the
unit's SQLAlchemy session. Both return rows as mappings by column name.

Either driver says "PostgreSQL cannot be reached" in its own ways (a refused or reset socket, a
server shutting down or still in crash recovery, a connection closed under a query, SQLAlchemy's
invalidated connection, a pool whose checkout timed out, no primary among the hosts, a node that
is read-only because it is not the primary). `reaching` turns every one of them into
`outlive.errors.ServiceUnavailable`, here and nowhere else: the statements below run inside it,
and `outlive.db.tx` puts the units' connection, commit and rollback inside it too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from typing import Any

import asyncpg
from sqlalchemy import CursorResult, Executable
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db import reads
from outlive.db.raw import Statement
from outlive.errors import BadUserInput, DomainError, QueryTimeout, ServiceUnavailable

Row = Mapping[str, Any]  # a result row by column name, whichever driver produced it
Query = Statement | Executable  # a prepared constant, or any SQLAlchemy statement (session only)


log = logging.getLogger(__name__)

RETRY_AFTER_S = 2  # what a 503 tells the client: about the time a restarted PostgreSQL takes

# asyncpg's ways of saying the server is gone or not there yet. Not the rest of SQLSTATE class 57
# (a statement timeout is `QueryCanceledError`, an answer, not an outage).
_GONE = (
    OSError,  # refused, reset, unreachable; TimeoutError (a connect timeout) is one too
    asyncpg.PostgresConnectionError,  # class 08, and a connection closed under a query
    asyncpg.CannotConnectNowError,  # starting up, in crash recovery, shutting down
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    # "cannot execute … in a read-only transaction": the connection reached a standby, or a
    # primary fenced read-only in place (`outlive.db.primary`); the primary is elsewhere, or
    # not there yet. Outlive runs no read-only transaction of its own.
    asyncpg.ReadOnlySQLTransactionError,
)


def unreachable(error: BaseException) -> bool:
    """True when `error` says PostgreSQL cannot be reached, by either driver: one of the errors
    above, or a driver's error that wraps one. What another library raised (Redis's connection
    error wrapping its own refused socket) is not looked into: it is not PostgreSQL's."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _GONE) and not (current is error and _a_deadline(current)):
            return True
        if isinstance(current, asyncpg.InterfaceError) and "closed" in str(current):
            return True  # asyncpg's "connection is closed" / "pool is closed"
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, sa_exc.TimeoutError | sa_exc.DisconnectionError):  # pool checkout
            return True
        if not _from_a_driver(current):
            return False
        wrapped = getattr(current, "orig", None)
        current = (
            wrapped
            if isinstance(wrapped, BaseException) and id(wrapped) not in seen
            else current.__cause__ or current.__context__
        )
    return False


def _a_deadline(error: BaseException) -> bool:
    """A bare `TimeoutError` is an `asyncio.timeout` running out around anything in a unit (a
    Redis call bounded by `OUTLIVE_QUEUE_TIMEOUT_S`): not PostgreSQL's unless a driver's error
    carries it."""
    return isinstance(error, TimeoutError)


def _from_a_driver(error: BaseException) -> bool:
    module = type(error).__module__
    return module.startswith(("asyncpg", "sqlalchemy"))


def reaching(connection: asyncpg.Connection | None = None) -> _Reaching:
    """The block's driver failures that mean "PostgreSQL cannot be reached" leave it as
    `ServiceUnavailable` (the original as its cause); everything else passes unchanged.

    With the pooled `connection` the block ran on:
    - a failure is also one when that connection is gone. asyncpg hands a connection the server
      closed back to its pool at once, detaching it from whoever holds it, so the holder's next
      statement says "released back to the pool". Misuse of a live connection stays a bug.
    - the connection is terminated before its holder releases it. A query cut off by the server
      can leave the protocol mid-operation before asyncpg has seen the socket close; released
      as it is, the next statement on it failed with "another operation is in progress"."""
    return _Reaching(connection)


class _Reaching:
    """`reaching`'s block: a class, not a generator, since it wraps every statement."""

    __slots__ = ("connection",)

    def __init__(self, connection: asyncpg.Connection | None) -> None:
        self.connection = connection

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, ServiceUnavailable | DomainError):
            return
        _answered(exc)
        connection = self.connection
        if not (unreachable(exc) or (connection is not None and _gone(connection))):
            return
        if connection is not None:
            _terminate(connection)
        _outage.seen(exc)
        raise ServiceUnavailable(retry_after=RETRY_AFTER_S) from exc


def _answered(error: BaseException) -> None:
    """PostgreSQL's answers that are the caller's, raised as coded errors without the driver's
    text: a statement past `statement_timeout` (`QueryTimeout`), and a value it cannot take
    (SQLSTATE class 22: a datetime out of range, `Infinity` in JSON; `BadUserInput`). asyncpg
    writes the argument's repr into the latter's message, so it must not reach a log."""
    cause = getattr(error, "orig", None) if isinstance(error, sa_exc.DBAPIError) else error
    cause = getattr(cause, "__cause__", None) or cause  # SQLAlchemy's adapted asyncpg error
    for candidate in (error, cause):
        if isinstance(candidate, asyncpg.QueryCanceledError):
            raise QueryTimeout() from None
        if isinstance(candidate, asyncpg.DataError):
            raise BadUserInput("a value is out of range or not valid here") from None


def _gone(connection: asyncpg.Connection) -> bool:
    """The connection was closed, or released by asyncpg because it was (we never use one after
    our own release: `Sessions` scopes it to a unit)."""
    try:
        return bool(connection.is_closed())
    except asyncpg.InterfaceError:  # "cannot call Connection.is_closed(): … released …"
        return True


def _terminate(connection: asyncpg.Connection) -> None:
    """Close it at once; the pool connects afresh for its next user."""
    with suppress(asyncpg.InterfaceError):  # already released by asyncpg: nothing to close
        connection.terminate()


class _Outage:
    """One WARNING every `every_s` at most while PostgreSQL cannot be reached, naming the
    driver's error: what an operator reads beside the 503s (and a worker's retries)."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self._last = -every_s

    def seen(self, error: BaseException) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            log.warning("PostgreSQL cannot be reached (%r): answering ServiceUnavailable", error)


_outage = _Outage()


def _rowcount(status: str) -> int:
    """asyncpg's command tag (`UPDATE 3`, `INSERT 0 1`) as a row count."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0


async def raw_one(on: asyncpg.Pool | asyncpg.Connection, st: Statement, params: Any) -> Row | None:
    row: Row | None = await _statement(on, lambda c: c.fetchrow(st.sql, *st.args(params)))
    return row


async def raw_all(on: asyncpg.Pool | asyncpg.Connection, st: Statement, params: Any) -> list[Row]:
    rows: list[Row] = await _statement(on, lambda c: c.fetch(st.sql, *st.args(params)))
    return rows


async def raw_execute(on: asyncpg.Pool | asyncpg.Connection, st: Statement, params: Any) -> int:
    status: str = await _statement(on, lambda c: c.execute(st.sql, *st.args(params)), read=False)
    return _rowcount(status)


async def _statement(
    on: asyncpg.Pool | asyncpg.Connection,
    call: Callable[[asyncpg.Connection], Awaitable[Any]],
    *,
    read: bool = True,
) -> Any:
    """One statement, on `on` itself (a unit's connection) or on a connection taken from the
    pool for it and given back after (`held`), so that a failure on it is handled before it goes
    back (`reaching`). A `read` runs within the request's read scope (`outlive.db.reads`): its
    rows are counted against the byte budget, and one on the pool waits for a slot of its
    tenant's gate first. One on a unit's connection never waits for a slot: with the slots taken
    by statements waiting for the pool, and the pool held by transactions waiting for a slot,
    nobody would move (a 200-run burst of one tenant hung that way). Written out rather than as
    nested context managers: every statement of a request comes through here."""
    scope = reads.current() if read else None
    if scope is not None:
        scope.check()
    if not isinstance(on, asyncpg.Pool):
        with reaching(on):
            result = await call(on)
    else:
        gate = None if scope is None else scope.gate
        if gate is not None:
            await gate.acquire()
        try:
            if gate is not None:
                scope.check()  # type: ignore[union-attr]  # a gate comes with its scope
            with reaching():  # the connect, when the pool has to make one
                connection = await on.acquire()
            try:
                with reaching(connection):
                    result = await call(connection)
            finally:
                await release(on, connection)
        finally:
            if gate is not None:
                gate.release()
    if scope is not None and scope.charge(result):
        del result  # not kept alive by the error's frames
        scope.check()
    return result


async def release(pool: asyncpg.Pool, connection: asyncpg.Connection) -> None:
    """Give `connection` back to `pool`. When the server closed it meanwhile, asyncpg may
    already have taken its holder back, and `release` then fails ("called on a free connection
    holder") although the block's statements committed: that is no failure of the block."""
    try:
        await pool.release(connection)
    except (asyncpg.InterfaceError, asyncpg.InternalClientError):
        if not _gone(connection):
            raise
        _terminate(connection)


async def in_session(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> Any:
    clause = query.clause if isinstance(query, Statement) else query
    with reaching():
        return await session.execute(clause, dict(params) if params else None)


async def session_one(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> Row | None:
    return (await in_session(session, query, params)).mappings().first()  # type: ignore[no-any-return]  # Result is untyped here


async def session_all(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> list[Row]:
    return list((await in_session(session, query, params)).mappings().all())


async def session_execute(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> int:
    result = await in_session(session, query, params)
    return result.rowcount if isinstance(result, CursorResult) else 0
