"""Run replays and bulk cancels: one row per `replayRuns` or `cancelRuns` (its `kind`), advanced
by the `run.replay.v1` job at its pace.

The row is the replay's whole state: what it selects (statuses, agent, since; always runs created
before the replay itself, so the runs it starts are never selected again), its pace, how far it
got (a keyset cursor over `(created_at, id)`), its counters, and whether it waits for an active
run of an agent to settle (one active run per agent still holds).
"""

import enum
from datetime import datetime
from uuid import UUID

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class ReplayStatus(enum.StrEnum):
    RUNNING = "RUNNING"
    DONE = "DONE"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"


class ReplayKind(enum.StrEnum):
    REPLAY = "REPLAY"
    CANCEL = "CANCEL"


class RunReplay(Base):
    __tablename__ = "run_replays"
    __table_args__ = (
        CheckConstraint("status IN ('RUNNING', 'DONE', 'CANCELLED', 'FAILED')", name="status"),
        CheckConstraint("kind IN ('REPLAY', 'CANCEL')", name="kind"),
        Index(
            "uq_run_replays_one_running_per_kind",
            "tenant_id",
            "kind",
            unique=True,
            postgresql_where=text("status = 'RUNNING'"),
        ),
        Index("ix_run_replays_tenant_newest", "tenant_id", text("created_at DESC")),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String, server_default=ReplayKind.REPLAY.value)
    statuses: Mapped[list[str]] = mapped_column(ARRAY(String))
    agent: Mapped[str | None]
    since: Mapped[datetime | None]
    before: Mapped[datetime | None]
    key: Mapped[str | None]
    tags: Mapped[list[str]] = mapped_column(ARRAY(String), server_default=text("'{}'"))
    top_level: Mapped[bool] = mapped_column(server_default=text("false"))
    reason: Mapped[str | None]
    requested_by: Mapped[str | None]
    rate: Mapped[float]
    total: Mapped[int]
    status: Mapped[str] = mapped_column(String, server_default=ReplayStatus.RUNNING.value)
    started: Mapped[int] = mapped_column(server_default=text("0"))
    skipped: Mapped[int] = mapped_column(server_default=text("0"))
    cancelled: Mapped[int] = mapped_column(server_default=text("0"))
    cursor_created_at: Mapped[datetime | None]
    cursor_id: Mapped[UUID | None]
    waiting_for_run_id: Mapped[UUID | None]
    tick: Mapped[int] = mapped_column(
        server_default=text("0")
    )  # duplicate deliveries see a stale one
    last_error: Mapped[str | None]
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    finished_at: Mapped[datetime | None]
