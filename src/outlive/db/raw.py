"""The hot path's statements, straight to asyncpg.

SQLAlchemy builds and checks every statement (they are `text()` constants with typed columns);
the few that run on every request or every run step (authentication, start, claim, a timeline
event, reading a run) are compiled once for asyncpg here and, in units that are a single
statement, executed on a plain asyncpg pool: no session, no greenlet hop, no BEGIN/COMMIT. In a
transactional unit the same statement runs through the SQLAlchemy session, so results are the
same either way (the tests run both). Which one runs it is `outlive.db.tx`'s choice (the `Db`
interface); a `Statement` is only the SQL, compiled once, when it first runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import asyncpg
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import TextualSelect

from outlive.db import primary

_DIALECT = asyncpg_dialect()  # type: ignore[no-untyped-call]  # untyped in SQLAlchemy


class Statement:
    """A `text()` constant, compiled for asyncpg the first time it runs (`sql`, `names`).

    Compiled lazily: a process runs a few of the 230 statements a worker's imports declare (a
    worker none of the API's pages, the API none of the worker's steps), and compiling every one
    at import was about 70 ms of a worker's 1.5 s of imports on a slow 2-core VM. Compiling
    twice, should two tasks race to it, gives the same text: no lock."""

    __slots__ = ("_compiled", "clause")

    def __init__(self, clause: TextClause | TextualSelect) -> None:
        self.clause = clause
        self._compiled: tuple[str, tuple[str, ...]] | None = None

    def _compile(self) -> tuple[str, tuple[str, ...]]:
        if self._compiled is None:
            compiled = self.clause.compile(dialect=_DIALECT)
            self._compiled = (compiled.string, tuple(compiled.positiontup or ()))
        return self._compiled

    @property
    def sql(self) -> str:
        return self._compile()[0]

    @property
    def names(self) -> tuple[str, ...]:
        return self._compile()[1]

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


def prepare(clause: TextClause | TextualSelect) -> Statement:
    return Statement(clause)


async def _setup(conn: asyncpg.Connection) -> None:
    # Parameters arrive already serialized (CAST(:x AS jsonb) with a str); results decode.
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(kind, encoder=str, decoder=json.loads, schema="pg_catalog")


async def keep_session(_: asyncpg.Connection) -> None:
    """Nothing to reset: these connections only ever run prepared single statements (no SET, no
    LISTEN, no advisory lock), and asyncpg's default reset is a round trip (`RESET ALL` and co.)
    on every release: it doubled the statements PostgreSQL ran for each authenticated request.
    The directory's pool (`db.directory`) is such a pool too: its reads and acknowledgements,
    two a second per API process, each had a reset after it."""


def server_settings(statement_timeout_s: float | None) -> dict[str, str]:
    """The session settings of a connection: its name, and an API's `statement_timeout` (a
    statement past it is cancelled by PostgreSQL: `QueryTimeout`)."""
    settings = {"application_name": "outlive"}
    if statement_timeout_s:
        settings["statement_timeout"] = f"{round(statement_timeout_s * 1000)}ms"
    return settings


async def create_pool(
    database_url: str,
    *,
    max_size: int = 10,
    statement_cache: bool = True,
    statement_timeout_s: float | None = None,
) -> asyncpg.Pool:
    """A pool for single statements. `database_url` is the contract's `postgresql://…` (one
    host or several: `outlive.db.primary`).
    `statement_cache=False` (PgBouncer in transaction mode): no statements prepared by name."""
    return await asyncpg.create_pool(
        database_url,
        connect=primary.connect,  # the primary among the URL's hosts, checked writable
        min_size=1,
        max_size=max_size,
        init=_setup,
        reset=keep_session,  # asyncpg still rolls back a transaction left open, locally checked
        server_settings=server_settings(statement_timeout_s),
        **({} if statement_cache else {"statement_cache_size": 0}),
    )
