"""The two drivers a `Db` (`outlive.db.tx`) chooses between, and nothing else chooses.

A prepared `Statement` runs on asyncpg directly (a pool or one of its connections) when no
transaction is open; inside a transaction, it (or any SQLAlchemy statement) runs through the
unit's SQLAlchemy session. Both return rows as mappings by column name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
from sqlalchemy import CursorResult, Executable
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.raw import Statement

Row = Mapping[str, Any]  # a result row by column name, whichever driver produced it
Query = Statement | Executable  # a prepared constant, or any SQLAlchemy statement (session only)


def _rowcount(status: str) -> int:
    """asyncpg's command tag (`UPDATE 3`, `INSERT 0 1`) as a row count."""
    last = status.rpartition(" ")[2]
    return int(last) if last.isdigit() else 0


async def raw_one(on: asyncpg.Pool | asyncpg.Connection, st: Statement, params: Any) -> Row | None:
    row: Row | None = await on.fetchrow(st.sql, *st.args(params))
    return row


async def raw_all(on: asyncpg.Pool | asyncpg.Connection, st: Statement, params: Any) -> list[Row]:
    rows: list[Row] = await on.fetch(st.sql, *st.args(params))
    return rows


async def raw_execute(on: asyncpg.Pool | asyncpg.Connection, st: Statement, params: Any) -> int:
    return _rowcount(await on.execute(st.sql, *st.args(params)))


async def in_session(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> Any:
    clause = query.clause if isinstance(query, Statement) else query
    return await session.execute(clause, dict(params) if params else None)


async def session_one(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> Row | None:
    return (await in_session(session, query, params)).mappings().first()  # type: ignore[no-any-return]  # Result is untyped here


async def session_all(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> list[Row]:
    return list((await in_session(session, query, params)).mappings().all())


async def session_execute(session: AsyncSession, query: Query, params: Mapping[str, Any]) -> int:
    result = await in_session(session, query, params)
    return result.rowcount if isinstance(result, CursorResult) else 0
