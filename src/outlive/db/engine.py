"""Building the async engine from the contract's `postgresql://` URL."""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from outlive.db.tx import Sessions


def sqlalchemy_url(database_url: str) -> str:
    """`postgresql://…` (the contract's form) → the asyncpg dialect SQLAlchemy needs."""
    url = make_url(database_url)
    return url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def create_engine(database_url: str, *, pool_size: int = 10, max_overflow: int = 20) -> AsyncEngine:
    return create_async_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=False,
        pool_recycle=1800,
        # An error's text (and so a logged traceback) never carries the statement's parameters:
        # they can be secrets (a fresh `whsec_`) or a tenant's data.
        hide_parameters=True,
        # asyncpg's own statement cache is on; SQLAlchemy's compiled cache covers the rest.
        connect_args={"server_settings": {"application_name": "outlive"}},
    )


def create_sessions(engine: AsyncEngine) -> Sessions:
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    return Sessions(
        async_sessionmaker(engine, expire_on_commit=False, autoflush=False),
        autocommit_maker=async_sessionmaker(autocommit, expire_on_commit=False, autoflush=False),
    )
