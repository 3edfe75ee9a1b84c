"""Runs and their timeline.

`runs` carries the claim: `status` + `attempt` move only through conditional updates (see
`outlive.services.runs`), and `lease_expires_at` is the claim's lease: a RUNNING run is held by
its attempt until the lease expires without a heartbeat. The partial unique index over the active
statuses is what makes "one active run per tenant, agent and key" true across every process: the
run at the head of its key's line is in it; runs QUEUED behind it (`queued_behind_id` set, under
the ENQUEUE strategy) are not, and a trigger (`outlive_advance_line`) moves the line on in the
same transaction as any settle. A second unique index lets only one run stand directly behind
another, so two concurrent ENQUEUEs cannot fork a line.
`event_seq` is the per-run counter that keeps timeline `seq` gap-free: it is bumped in the same
statement that inserts the event, under the row lock, and rolls back with it. `step_seq` does
the same for the durable-step journal (`run_steps`): the completion order of its steps.
"""

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
    SmallInteger,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class RunStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    WAITING = "WAITING"  # parked on a durable sleep or a signal: holds no worker, no slot


class RunConflict(enum.StrEnum):
    """What `startRun` does when its key already has an active run (contract §4.1)."""

    RETURN_EXISTING = "RETURN_EXISTING"
    ENQUEUE = "ENQUEUE"
    CANCEL_PREVIOUS = "CANCEL_PREVIOUS"
    REJECT = "REJECT"
    SIGNAL_EXISTING = "SIGNAL_EXISTING"


# Active: not settled. WAITING keeps its (tenant, agent) slot but holds no worker and no place
# under its tenant's cap (the dispatch function counts QUEUED and RUNNING only).
ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
ACTIVE_SQL = "status IN ('QUEUED', 'RUNNING', 'WAITING')"
# The head of its key's line: the run the partial unique index holds one of per key.
HEAD_SQL = f"{ACTIVE_SQL} AND queued_behind_id IS NULL"
BEHIND_SQL = "status = 'QUEUED' AND queued_behind_id IS NOT NULL"
# QUEUED and waiting for a slot under its tenant's cap (not for its turn in a key's line).
WAITING_SQL = "status = 'QUEUED' AND dispatched_at IS NULL AND queued_behind_id IS NULL"
# The relay's first look at a row: the fast path (the enqueue after its commit) handed it by then.
RELAY_FIRST_LOOK = "now() + interval '10 seconds'"
_STATUS_LIST = ", ".join(f"'{s.value}'" for s in RunStatus)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(f"status IN ({_STATUS_LIST})", name="status"),
        Index(
            "uq_runs_one_active_per_key",
            "tenant_id",
            "agent",
            "key",
            unique=True,
            postgresql_where=text(HEAD_SQL),
        ),
        Index(  # one run directly behind another: a key's line never forks
            "uq_runs_queued_behind",
            "queued_behind_id",
            unique=True,
            postgresql_where=text(BEHIND_SQL),
        ),
        Index(
            "uq_runs_idempotency_key",
            "tenant_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(  # runs(key:), and a key's line
            "ix_runs_tenant_key",
            "tenant_id",
            "key",
            text("created_at DESC"),
            text("id DESC"),
            postgresql_where=text("key <> ''"),
        ),
        Index(  # runs(tags:), eraseSubject: a tenant's runs carrying all (migrations 0021, 0048)
            "ix_runs_tenant_tags",
            text("outlive_tenant_tags(tenant_id, tags)"),
            postgresql_using="gin",
            postgresql_where=text("tags <> '{}'"),
        ),
        Index("ix_runs_tenant_newest", "tenant_id", text("created_at DESC"), text("id DESC")),
        Index(  # a tenant's waiting runs in the order they are admitted: priority, then age
            "ix_runs_waiting",
            "tenant_id",
            "priority",
            "created_at",
            "id",
            postgresql_where=text(WAITING_SQL),
        ),
        Index(  # runs(scheduleId:), newest first; an occurrence makes at most one run
            "uq_runs_schedule_occurrence",
            "schedule_id",
            "scheduled_for",
            unique=True,
            postgresql_where=text("schedule_id IS NOT NULL"),
        ),
        Index(  # the relay's clock: the earliest debounced run still held back
            "ix_runs_not_before",
            "not_before",
            postgresql_where=text(f"{WAITING_SQL} AND not_before IS NOT NULL"),
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
        Index(  # the relay's look for runs of a gone worker (`outlive.db.liveness`)
            "ix_runs_running",
            "worker_id",
            postgresql_where=text("status = 'RUNNING'"),
        ),
        Index(  # a child's identity under its parent: started once, however often asked
            "uq_runs_parent_step",
            "parent_id",
            "parent_step",
            unique=True,
            postgresql_where=text("parent_id IS NOT NULL"),
        ),
        Index(  # Run.children, oldest first; a parent's live children at its settle or cancel
            "ix_runs_children",
            "parent_id",
            "created_at",
            "id",
            postgresql_where=text("parent_id IS NOT NULL"),
        ),
        Index(  # Run.retriedAsIds: the runs that retried a run, newest first
            "ix_runs_retried_from",
            "retried_from_id",
            text("created_at DESC"),
            postgresql_where=text("retried_from_id IS NOT NULL"),
        ),
        Index(  # Budget.heldRuns, and the runs a raised or deleted budget lets go
            "ix_runs_held_by_budget",
            "held_by_budget_id",
            postgresql_where=text("held_by_budget_id IS NOT NULL"),
        ),
        Index(  # runs(paused: true), and the runs a resumed agent or tenant lets go
            "ix_runs_paused",
            "tenant_id",
            "agent",
            postgresql_where=text("paused_at IS NOT NULL"),
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
    # The liveness key of the worker process whose attempt holds a RUNNING run: that process
    # holds a session advisory lock on it while it lives (`outlive.db.liveness`); a free lock
    # means the process is gone and the run may be claimed at once. NULL: the lease alone.
    worker_id: Mapped[int | None]
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
    # Keys (contract §4.1): the exclusivity key ('' = the agent's default), the strategy it was
    # started with (retryRun and replays use it again), the run just ahead of it in its key's
    # line while it waits its turn (ENQUEUE; kept once settled), its tags and idempotency key.
    key: Mapped[str] = mapped_column(server_default=text("''"))
    on_conflict: Mapped[str | None]
    queued_behind_id: Mapped[UUID | None]
    tags: Mapped[list[str]] = mapped_column(ARRAY(String), server_default=text("'{}'"))
    idempotency_key: Mapped[str | None]

    # A child run (`ctx.call` / `ctx.spawn` / `ctx.map`, see `outlive.workflows.children`): the
    # run that started it, the top of its tree (NULL: a top-level run, its own root), its
    # identity under its parent ("name#occurrence"), its depth (0 at the top), and whether it
    # is left running when its parent settles. `children_settled` counts a parent's settled
    # children (the trigger `outlive_child_settled`): a parent parks only at the count it read.
    parent_id: Mapped[UUID | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    root_id: Mapped[UUID | None]
    parent_step: Mapped[str | None]
    depth: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    children_settled: Mapped[int] = mapped_column(server_default=text("0"))
    wake_at_children: Mapped[int | None]  # WAITING for children: woken at this count
    abandon_with_parent: Mapped[bool] = mapped_column(server_default=text("false"))

    # Pauses and budgets (contract §7, round five). `paused_at`: held by a pause, and whose
    # (`paused_by`: 'run' for pauseRun, 'agent' for pauseAgent, 'tenant' for `outlive tenant
    # pause`); a held run is WAITING for 'pause' (a RUNNING one at its next step). A run held by
    # a budget is WAITING for 'budget' with `held_by_budget_id`; `budget_override`: resumed with
    # `resumeRun(overBudget: true)`, it may finish past its budgets.
    paused_at: Mapped[datetime | None]
    paused_by: Mapped[str | None]
    held_by_budget_id: Mapped[UUID | None] = mapped_column(
        ForeignKey("budgets.id", ondelete="SET NULL")
    )
    budget_override: Mapped[bool] = mapped_column(server_default=text("false"))
    # While WAITING on a wait that named itself (`ctx.wait_for(..., wait_id=)`): its id (NULL:
    # `wait-<attempt>`, `services.waits.wait_id_of`), and what it asked to show (`show=`).
    # The columns are in the order the migrations added them: statements that `SELECT *` match
    # result columns by position.
    wait_id: Mapped[str | None]
    waiting_show: Mapped[Any | None] = mapped_column(JSONB)
    # The agent's code version when the run started (`Run.codeVersion`; contract §7 "Versions"),
    # set by its first claim (`outlive.agents.versions`). WAITING for 'version': a resumed
    # attempt found that its code does not reach the steps the run recorded (held, not failed).
    code_version: Mapped[str | None]
    # Schedules, debounce and priority (contract §7, round five): the schedule and occurrence a
    # run is for; its priority among its tenant's waiting runs (1 first); a debounced run is not
    # admitted before `not_before`, which later starts of its key move on, never past
    # `debounce_until` (its first start + maxSeconds; NULL: not debounced).
    schedule_id: Mapped[UUID | None]
    scheduled_for: Mapped[datetime | None]
    priority: Mapped[int] = mapped_column(SmallInteger, server_default=text("3"))
    not_before: Mapped[datetime | None]
    debounce_until: Mapped[datetime | None]


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
    # When its gate let it start (`outlive_step_gate`); NULL for steps recorded before round five.
    started_at: Mapped[datetime | None]
    # The model usage the step recorded (`ctx.record_usage`): none for most steps, and none for
    # a step copied from another run (`retryRun(reuseSteps: true)`): that run paid for it.
    requests: Mapped[int] = mapped_column(server_default="0")
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    model: Mapped[str | None]
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric)
    # The code version of the agent that recorded it (NULL: before round five; a copied step
    # keeps the version of the run it was copied from).
    code_version: Mapped[str | None]


class RunWait(Base):
    """The durable record of one sleep or wait of a run, keyed like a step: by kind (`sleep`, or
    `signal` with the signal's name) and occurrence (the count of such calls in program order
    within an attempt). A later attempt that reaches the same call finds it resolved and gets the
    result back at once (`None` for a timeout)."""

    __tablename__ = "run_waits"
    __table_args__ = (
        Index(
            "uq_run_waits_wait_id",
            "run_id",
            "wait_id",
            unique=True,
            postgresql_where=text("wait_id IS NOT NULL"),
        ),
    )

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
    # A wait that named itself: only a signal bound to this id answers it (unique per run).
    wait_id: Mapped[str | None]


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
        Index("ix_run_signals_run", "run_id"),  # a deleted run's signals (retention, erasure)
    )

    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    run_id: Mapped[UUID] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    tenant_id: Mapped[UUID]
    name: Mapped[str]
    payload: Mapped[Any | None] = mapped_column(JSONB)
    idempotency_key: Mapped[str | None]
    created_at: Mapped[datetime] = now_default()
    delivered_at: Mapped[datetime | None]


class RunCall(Base):
    """A model call a step made and did not record (yet): written before the call, deleted by
    the statement that records its step (or when the endpoint refused it: not billed). A row
    left once its attempt is over is an abandoned request: billed, its reply never kept (a
    worker killed mid-call, a cancel, a timeout; `RunUsage.abandonedRequests`)."""

    __tablename__ = "run_calls"
    __table_args__ = (Index("ix_run_calls_step", "run_id", "step", "occurrence"),)

    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    run_id: Mapped[UUID] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    attempt: Mapped[int]
    step: Mapped[str]
    occurrence: Mapped[int]
    model: Mapped[str | None]
    started_at: Mapped[datetime] = now_default()
    ended_at: Mapped[datetime | None]  # ended in the process without a record: cut, timed out
    reason: Mapped[str | None]
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
