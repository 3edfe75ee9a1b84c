"""Alembic environment: async, URL from `DATABASE_URL` (or the caller's `database_url`)."""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from outlive.db.engine import create_engine, sqlalchemy_url
from outlive.db.models import Base

config = context.config
target_metadata = Base.metadata


def _database_url() -> str:
    """The contract's form: one host or several (`outlive.urls`)."""
    url = config.attributes.get("database_url") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("DATABASE_URL is not set")
    return str(url)


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
    with context.begin_transaction():
        # Two `outlive migrate` at once (say, two machines deploying) take turns.
        connection.execute(text("SELECT pg_advisory_xact_lock(7007001)"))
        context.run_migrations()


async def _run_async() -> None:
    engine = create_engine(_database_url(), pool_size=1)  # to the primary, as everything
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=sqlalchemy_url(_database_url()), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async())
