"""Schedules as data (contract §4.2, §7 "Schedules"): a tenant's own cron, fired by the relay.

A schedule's cursor is `next_occurrence`: the next nominal occurrence (UTC) of its cron in its
time zone; `next_fire_at` is that occurrence plus its jitter, what the relay's clock waits for.
Both are NULL while it is paused. Firing an occurrence moves the cursor and starts its run in
one transaction, and a run carries `(schedule_id, scheduled_for)`, unique
(`uq_runs_schedule_occurrence`): an occurrence makes at most one run, whoever fires it and
however often (`outlive.services.schedules`).
"""

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import ARRAY, CheckConstraint, ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class Schedule(Base):
    __tablename__ = "schedules"
    __table_args__ = (
        CheckConstraint("jitter_seconds >= 0", name="jitter_seconds"),
        CheckConstraint("catchup_window_seconds >= 0", name="catchup_window_seconds"),
        Index(  # the relay's clock: one probe of the earliest due schedule when idle
            "ix_schedules_due",
            "next_fire_at",
            postgresql_where=text("next_fire_at IS NOT NULL"),
        ),
        Index("ix_schedules_tenant", "tenant_id", "created_at", "id"),
        Index(  # ctx.schedules.create: one schedule per (run, step), whatever the crashes
            "uq_schedules_origin",
            "tenant_id",
            "origin",
            unique=True,
            postgresql_where=text("origin IS NOT NULL"),
        ),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    agent: Mapped[str]
    cron: Mapped[str]
    timezone: Mapped[str]
    input: Mapped[dict[str, Any]]
    key: Mapped[str]
    on_conflict: Mapped[str] = mapped_column(String)
    tags: Mapped[list[str]] = mapped_column(ARRAY(String), server_default=text("'{}'"))
    jitter_seconds: Mapped[int] = mapped_column(server_default=text("0"))
    catchup_window_seconds: Mapped[int] = mapped_column(server_default=text("300"))
    paused_at: Mapped[datetime | None]
    next_occurrence: Mapped[datetime | None]
    next_fire_at: Mapped[datetime | None]
    last_fire_at: Mapped[datetime | None]
    origin: Mapped[str | None]  # made by a run's step: "<run id>/<step>#<occurrence>"
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
