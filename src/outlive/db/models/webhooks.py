"""Webhook endpoints (Standard Webhooks) and one delivery row per (settled run, endpoint)."""

import enum
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk
from outlive.db.models.runs import RELAY_FIRST_LOOK


class DeliveryStatus(enum.StrEnum):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"


class WebhookEndpoint(Base):
    __tablename__ = "webhook_endpoints"

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    url: Mapped[str]
    secret: Mapped[str]
    events: Mapped[list[str]] = mapped_column(ARRAY(String), server_default=text("'{}'"))
    created_at: Mapped[datetime] = now_default()


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING', 'DELIVERED', 'FAILED')", name="status"),
        Index("ix_webhook_deliveries_endpoint_newest", "endpoint_id", text("created_at DESC")),
        Index("ix_webhook_deliveries_created_at", "created_at"),
        Index(
            "ix_webhook_deliveries_pending",
            "tenant_id",
            "created_at",
            "id",
            postgresql_where=text("status = 'PENDING'"),
        ),
        Index(
            "ix_webhook_deliveries_relay",
            "relay_after",
            postgresql_where=text("status = 'PENDING' AND dispatched_at IS NOT NULL"),
        ),
        Index(  # an erased run's deliveries (`eraseSubject`)
            "ix_webhook_deliveries_run",
            "run_id",
            postgresql_where=text("run_id IS NOT NULL"),
        ),
        Index(
            "ix_webhook_deliveries_waiting",
            "tenant_id",
            "created_at",
            postgresql_where=text("status = 'PENDING' AND dispatched_at IS NULL"),
        ),
    )

    id: Mapped[UUID] = uuid_pk()
    endpoint_id: Mapped[UUID] = mapped_column(
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE")
    )
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    run_id: Mapped[UUID | None]
    event_type: Mapped[str]
    body: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String, server_default=DeliveryStatus.PENDING.value)
    attempts: Mapped[int] = mapped_column(server_default=text("0"))
    response_status: Mapped[int | None]
    last_error: Mapped[str | None]
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    delivered_at: Mapped[datetime | None]
    dispatched_at: Mapped[datetime | None]  # admitted under the tenant's jobs cap
    next_attempt_at: Mapped[datetime | None]  # a PENDING one that failed: when its retry is due
    relay_after: Mapped[datetime] = mapped_column(server_default=text(RELAY_FIRST_LOOK))


# The attempt log's bounds: each attempt keeps at most this many bytes of the response body, and a
# delivery keeps its newest this-many attempts (older ones are deleted as new ones are written).
ATTEMPT_EXCERPT_BYTES = 1024
ATTEMPT_ERROR_CHARS = 500
ATTEMPTS_KEPT = 20


class WebhookDeliveryAttempt(Base):
    """One attempt of a delivery: what the endpoint answered (or why there was no answer), when,
    and how long it took. Written by the outbox's lifecycle with the attempt it counts."""

    __tablename__ = "webhook_delivery_attempts"

    delivery_id: Mapped[UUID] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(primary_key=True)  # the delivery's `attempts` after it
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    response_status: Mapped[int | None]
    body_excerpt: Mapped[str | None]  # at most ATTEMPT_EXCERPT_BYTES of the body, decoded
    error: Mapped[str | None]
    started_at: Mapped[datetime]
    duration_ms: Mapped[int]
