"""`rejected_jobs`: every envelope the consumer could not parse, so nothing is silently lost;
`outlive jobs redrive` re-validates and re-sends them."""

from datetime import datetime
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class RejectedJob(Base):
    __tablename__ = "rejected_jobs"

    id: Mapped[UUID] = uuid_pk()
    type: Mapped[str | None]
    body: Mapped[str]
    error: Mapped[str]
    received_at: Mapped[datetime] = now_default()
    # `outlive jobs redrive`: each try is counted; a valid one is re-sent as a new envelope.
    redrive_attempts: Mapped[int] = mapped_column(server_default=text("0"))
    last_redrive_at: Mapped[datetime | None]
    redriven_at: Mapped[datetime | None]
    redriven_as: Mapped[UUID | None]
