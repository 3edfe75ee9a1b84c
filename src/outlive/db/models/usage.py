"""Daily usage: runs per tenant, UTC day, agent and status, rolled up by cron."""

from datetime import date, datetime
from uuid import UUID

from sqlalchemy import ForeignKey
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default


class UsageDaily(Base):
    __tablename__ = "usage_daily"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[date] = mapped_column(primary_key=True)
    agent: Mapped[str] = mapped_column(primary_key=True)
    status: Mapped[str] = mapped_column(primary_key=True)
    count: Mapped[int]


class UsageRollup(Base):
    """Which UTC days are rolled up: later days are counted live from `runs`."""

    __tablename__ = "usage_rollups"

    day: Mapped[date] = mapped_column(primary_key=True)
    rolled_at: Mapped[datetime] = now_default()
