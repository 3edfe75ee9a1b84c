"""Building the async engine from the contract's `postgresql://` URL.

Pool sizes come from `Settings` (the connection budget, see the README): `outlive.runtime`, the
only caller outside tests, uses `create_engine_for`, `open_raw_pool` and `create_sessions`.
`statement_cache=False` (for PgBouncer in transaction mode, `OUTLIVE_DB_PGBOUNCER=1`) turns off
asyncpg's statement cache and SQLAlchemy's prepared-statement cache, and names each prepared
statement uniquely, so that no statement prepared on one server connection is looked for on
another.

After PostgreSQL restarts, every pooled connection is dead. asyncpg notices (it reads each socket
all the time and marks a connection closed when the server goes away), and both pools drop such a
connection when it is next taken: the raw pool by itself, SQLAlchemy's through `_drop_closed` (a
local check, no round trip, unlike `pool_pre_ping`). So the first request after a restart gets a
fresh connection and succeeds; while the server is down, the connect fails and the db layer
answers `ServiceUnavailable`. A statement cut off on a raw connection terminates that connection
before it goes back (`outlive.db.drivers.reaching`).
"""

from __future__ import annotations

from functools import partial
from typing import Any
from uuid import uuid4

import asyncpg
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from outlive.config import Settings
from outlive.db import primary
from outlive.db.ports import NO_JOBS
from outlive.db.raw import create_pool, server_settings
from outlive.db.tx import (
    AdmissionFactory,
    JobProducer,
    NudgeSink,
    Sessions,
    drop_nudges,
    unwired_admission,
)
from outlive.urls import PostgresUrl

# SQLAlchemy's adapter of asyncpg, for `creator`
_DBAPI: Any = PGDialect_asyncpg.import_dbapi()  # type: ignore[no-untyped-call]  # untyped there


def sqlalchemy_url(database_url: str) -> str:
    """`postgresql://…` (the contract's form, one host or several) → the asyncpg dialect's URL
    (`outlive.urls`: several hosts go to its query). The engine connects through
    `outlive.db.primary` whatever it says; Alembic's offline mode prints it."""
    return PostgresUrl.parse(database_url).for_sqlalchemy("postgresql+asyncpg")


def _unique_statement_name() -> str:
    return f"__outlive_{uuid4().hex}__"


def _drop_closed(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """A pooled connection whose server went away is not handed out: SQLAlchemy's pool discards
    it and connects again (`DisconnectionError` at checkout, up to three times)."""
    driver = getattr(dbapi_connection, "driver_connection", None)
    if driver is not None and driver.is_closed():
        raise sa_exc.DisconnectionError("the pooled connection was closed by the server")


def _read_only_is_lost(context: Any) -> None:
    """ "cannot execute … in a read-only transaction": this connection reached a node that is
    not the primary (any more). Like a lost connection, it is invalidated, and with it every
    connection the pool opened before (`invalidate_pool_on_disconnect`): they reached the same
    place. `outlive.db.drivers` answers `ServiceUnavailable`."""
    if isinstance(_driver_error(context.original_exception), asyncpg.ReadOnlySQLTransactionError):
        context.is_disconnect = True


def _driver_error(error: BaseException) -> BaseException:
    """asyncpg's error under SQLAlchemy's adaptation of it."""
    return error.__cause__ if error.__cause__ is not None else error


def create_engine(
    database_url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 0,
    pool_timeout_s: float = 30.0,
    statement_cache: bool = True,
    statement_timeout_s: float | None = None,
) -> AsyncEngine:
    driver: dict[str, Any] = {"server_settings": server_settings(statement_timeout_s)}
    adapter: dict[str, Any] = {}
    if not statement_cache:
        driver["statement_cache_size"] = 0  # asyncpg's own cache
        adapter = {
            "prepared_statement_cache_size": 0,  # SQLAlchemy's, in its asyncpg dialect
            "prepared_statement_name_func": _unique_statement_name,
        }
    connect = partial(primary.connect, database_url)

    def creator() -> Any:
        """A connection to the primary (`outlive.db.primary`), adapted as SQLAlchemy's asyncpg
        dialect adapts its own (`async_creator` would drop the adapter's arguments)."""
        return _DBAPI.connect(async_creator_fn=connect, **adapter, **driver)

    engine = create_async_engine(
        sqlalchemy_url(database_url),
        creator=creator,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout_s,
        pool_pre_ping=False,
        pool_recycle=1800,
        # An error's text (and so a logged traceback) never carries the statement's parameters:
        # they can be secrets (a fresh `whsec_`) or a tenant's data.
        hide_parameters=True,
    )
    event.listen(engine.sync_engine, "handle_error", _read_only_is_lost)
    event.listen(engine.sync_engine, "checkout", _drop_closed)
    return engine


def create_engine_for(
    settings: Settings,
    database_url: str,
    *,
    pool_size: int | None = None,
    max_overflow: int | None = None,
    statement_timeout_s: float | None = None,
) -> AsyncEngine:
    """An engine sized by the connection budget's settings (a CLI command asks for fewer), with
    `OUTLIVE_DB_PGBOUNCER` honoured (no `statement_timeout` startup setting behind PgBouncer,
    which refuses startup settings it does not know)."""
    return create_engine(
        database_url,
        pool_size=settings.db_pool_size if pool_size is None else pool_size,
        max_overflow=settings.db_max_overflow if max_overflow is None else max_overflow,
        pool_timeout_s=settings.db_pool_timeout_s,
        statement_cache=not settings.db_pgbouncer,
        statement_timeout_s=None if settings.db_pgbouncer else statement_timeout_s,
    )


async def open_raw_pool(
    settings: Settings, database_url: str, *, statement_timeout_s: float | None = None
) -> asyncpg.Pool:
    """The raw asyncpg pool of a server process, within the connection budget; its caller
    closes it."""
    return await create_pool(
        database_url,
        max_size=settings.db_raw_pool_size,
        statement_cache=not settings.db_pgbouncer,
        statement_timeout_s=None if settings.db_pgbouncer else statement_timeout_s,
    )


def create_sessions(
    engine: AsyncEngine,
    *,
    autocommit: bool = True,
    raw: asyncpg.Pool | None = None,
    nudge_sink: NudgeSink = drop_nudges,
    jobs: JobProducer = NO_JOBS,
    admission: AdmissionFactory = unwired_admission,
) -> Sessions:
    """`autocommit=False` (PgBouncer in transaction mode): reads run in a transaction too, so a
    statement's prepare and its execution reach the same server connection."""
    maker = async_sessionmaker(engine, expire_on_commit=False, autoflush=False)
    autocommit_maker = maker
    if autocommit:
        autocommit_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        autocommit_maker = async_sessionmaker(
            autocommit_engine, expire_on_commit=False, autoflush=False
        )
    return Sessions(
        maker,
        nudge_sink,
        autocommit_maker=autocommit_maker,
        jobs=jobs,
        raw=raw,
        admission=admission,
    )
