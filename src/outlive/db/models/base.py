"""The declarative base, with a naming convention that keeps constraint names stable."""

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import MetaData, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import DateTime

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads this class attribute)
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSONB,
    }


def uuid_pk() -> Mapped[UUID]:
    return mapped_column(primary_key=True, server_default=text("gen_random_uuid()"))


def now_default() -> Mapped[datetime]:
    return mapped_column(server_default=func.now())


def columns_of(row: Base) -> dict[str, Any]:
    """A loaded ORM object as a mapping by column name: what `Db.one` returns for its table,
    so one record builder serves both."""
    return {c.key: getattr(row, c.key) for c in row.__table__.columns}
