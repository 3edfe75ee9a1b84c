"""Runs and their timeline.

`runs` carries the claim: `status` + `attempt` move only through conditional updates (see
`outlive.services.runs`), and `lease_expires_at` is the claim's lease: a RUNNING run is held by
its attempt until the lease expires without a heartbeat. The partial unique index over the active
statuses is what makes "one active run per tenant and agent" true across every process.
`event_seq` is the per-run counter that keeps timeline `seq` gap-free: it is bumped in the same
statement that inserts the event, under the row lock, and rolls back with it. `step_seq` does
the same for the durable-step journal (`run_steps`): the completion order of its steps.
"""

from __future__ import annotations

import enum
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Identity,
    Index,
    Numeric,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class RunStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    WAITING = "WAITING"  # parked on a durable sleep or a signal: holds no worker, no slot


# Active: not settled. WAITING keeps its (tenant, agent) slot but holds no worker and no place
# under its tenant's cap (the dispatch function counts QUEUED and RUNNING only).
ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
ACTIVE_SQL = "status IN ('QUEUED', 'RUNNING', 'WAITING')"
# The relay's first look at a row: the fast path (the enqueue after its commit) handed it by then.
RELAY_FIRST_LOOK = "now() + interval '10 seconds'"
_STATUS_LIST = ", ".join(f"'{s.value}'" for s in RunStatus)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUS_LIST})", name="status"),
        Index(
            "uq_runs_one_active_per_agent",
            "tenant_id",
            "agent",
            unique=True,
            postgresql_where=text(ACTIVE_SQL),
        ),
        Index("ix_runs_tenant_newest", "tenant_id", text("created_at DESC"), text("id DESC")),
        Index(
            "ix_runs_waiting",
            "tenant_id",
            "created_at",
            "id",
            postgresql_where=text("status = 'QUEUED' AND dispatched_at IS NULL"),
        ),
        Index(
            "ix_runs_in_flight",
            "tenant_id",
            postgresql_where=text("status IN ('QUEUED', 'RUNNING') AND dispatched_at IS NOT NULL"),
        ),
        Index(  # the relay's scan (see `outlive.services.relay`): one probe when idle
            "ix_runs_relay",
            "relay_after",
            postgresql_where=text("status = 'QUEUED' AND dispatched_at IS NOT NULL"),
        ),
        Index(  # the timers of WAITING runs (`outlive.services.waits`): one probe when idle
            "ix_runs_wake",
            "wake_at",
            postgresql_where=text("status = 'WAITING'"),
        ),
        Index(
            "ix_runs_settled_finished_at",
            "finished_at",
            postgresql_where=text("status NOT IN ('QUEUED', 'RUNNING')"),
        ),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    agent: Mapped[str]
    status: Mapped[str] = mapped_column(String, server_default=RunStatus.QUEUED.value)
    attempt: Mapped[int] = mapped_column(server_default=text("0"))
    input: Mapped[dict[str, Any]]
    output: Mapped[Any | None] = mapped_column(JSONB)
    error: Mapped[str | None]
    event_seq: Mapped[int] = mapped_column(server_default=text("0"))
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    cancel_requested_at: Mapped[datetime | None]
    # The lease of the attempt that holds a RUNNING run: extended by its heartbeats; a claim may
    # take over a RUNNING run only once it has expired (the worker was lost).
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    lost_attempts: Mapped[int] = mapped_column(server_default=text("0"))
    # Admitted under its tenant's cap (see `outlive.services.admission`); NULL: waiting for a slot.
    dispatched_at: Mapped[datetime | None]

    # The run this one retried (retryRun, a replay); not a foreign key: retention may prune it.
    retried_from_id: Mapped[UUID | None]
    # When the relay should next make sure the run's job is in the queue (`outlive.services.relay`)
    relay_after: Mapped[datetime] = mapped_column(server_default=text(RELAY_FIRST_LOOK))
    # The queue could not be reached to hand the run over; cleared when the relay hands it.
    handoff_failed_at: Mapped[datetime | None]
    # How many durable steps the run has completed (`run_steps.seq` of the last one).
    step_seq: Mapped[int] = mapped_column(server_default=text("0"))
    # While WAITING: the signal it waits for (NULL: a durable sleep) and when its timer (or the
    # signal's timeout) fires (NULL: no timeout). `resumes` counts the claims that resumed it:
    # they are new attempts but not retries (`attempt - lost_attempts - resumes` are the retries).
    waiting_for: Mapped[str | None]
    wake_at: Mapped[datetime | None]
    resumes: Mapped[int] = mapped_column(server_default=text("0"))


class RunEvent(Base):
    __tablename__ = "run_events"

    run_id: Mapped[UUID] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(primary_key=True)
    type: Mapped[str]
    data: Mapped[dict[str, Any]]
    at: Mapped[datetime] = now_default()


class RunStep(Base):
    """The durable-step journal (`ctx.step`): one row per completed step, keyed by its name and
    its occurrence (the how-many-th call of that name in the attempt, in program order, from 1).
    `result` is the step's JSON value, returned to any later attempt instead of running it
    again; `seq` is its place in the run's completion order (from `runs.step_seq`)."""

    __tablename__ = "run_steps"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)

    run_id: Mapped[UUID] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(primary_key=True)
    occurrence: Mapped[int] = mapped_column(primary_key=True)
    seq: Mapped[int]
    attempt: Mapped[int]
    result: Mapped[Any] = mapped_column(JSONB)
    completed_at: Mapped[datetime] = now_default()
    # The model usage the step recorded (`ctx.record_usage`): none for most steps, and none for
    # a step copied from another run (`retryRun(reuseSteps: true)`): that run paid for it.
    requests: Mapped[int] = mapped_column(server_default="0")
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    model: Mapped[str | None]
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric)


class RunWait(Base):
    """The durable record of one sleep or wait of a run, keyed like a step: by kind (`sleep`, or
    `signal` with the signal's name) and occurrence (the count of such calls in program order
    within an attempt). A later attempt that reaches the same call finds it resolved and gets the
    result back at once (`None` for a timeout)."""

    __tablename__ = "run_waits"

    run_id: Mapped[UUID] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    kind: Mapped[str] = mapped_column(primary_key=True)  # 'sleep' | 'signal'
    name: Mapped[str] = mapped_column(primary_key=True)  # the signal's name; '' for a sleep
    occurrence: Mapped[int] = mapped_column(primary_key=True)
    attempt: Mapped[int]  # the attempt that first reached it
    until: Mapped[datetime | None]  # the timer (or timeout); NULL: none
    created_at: Mapped[datetime] = now_default()
    resolved_at: Mapped[datetime | None]
    resolved_by: Mapped[str | None]  # 'timer' | 'signal' | 'timeout'
    payload: Mapped[Any | None] = mapped_column(JSONB)  # the delivered signal's payload


class RunSignal(Base):
    """A run's mailbox: every accepted signal, delivered to the first wait for its name, in
    order of `seq` (first in, first out)."""

    __tablename__ = "run_signals"
    __table_args__ = (
        Index(
            "uq_run_signals_idempotency_key",
            "run_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            "ix_run_signals_pending",
            "run_id",
            "name",
            "seq",
            postgresql_where=text("delivered_at IS NULL"),
        ),
    )

    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    run_id: Mapped[UUID] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    tenant_id: Mapped[UUID]
    name: Mapped[str]
    payload: Mapped[Any | None] = mapped_column(JSONB)
    idempotency_key: Mapped[str | None]
    created_at: Mapped[datetime] = now_default()
    delivered_at: Mapped[datetime | None]
