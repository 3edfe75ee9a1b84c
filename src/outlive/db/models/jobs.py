"""`rejected_jobs`: every envelope the consumer could not parse, so nothing is silently lost."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from sqlalchemy.orm import Mapped

from outlive.db.models.base import Base, now_default, uuid_pk


class RejectedJob(Base):
    __tablename__ = "rejected_jobs"

    id: Mapped[UUID] = uuid_pk()
    type: Mapped[str | None]
    body: Mapped[str]
    error: Mapped[str]
    received_at: Mapped[datetime] = now_default()
