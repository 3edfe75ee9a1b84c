"""Budgets: what a tenant's agents may spend, per scope and period (contract §4.2, §7 "Budgets").

A budget applies to the runs of its scope: the whole tenant, one agent (`target`), every run
carrying a tag (`target`), or each run on its own (`RUN`). Its period is a UTC day or month
(`budget_periods` holds what each period recorded), or the run itself (`RUN`: the run's own
usage). Before a step that expects usage starts, that usage is reserved against every budget
that applies (`budget_reservations`, one row per budget and step); the step's commit turns the
reservation into what it recorded. A reservation counts only while the attempt that made it
still holds its run RUNNING: a lost attempt's reservations are released by that alone.
"""

import enum
from datetime import datetime
from decimal import Decimal
from uuid import UUID

from sqlalchemy import (
    ARRAY,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Numeric,
    String,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class BudgetScope(enum.StrEnum):
    TENANT = "TENANT"
    AGENT = "AGENT"
    TAG = "TAG"
    RUN = "RUN"


class BudgetPeriod(enum.StrEnum):
    DAY = "DAY"
    MONTH = "MONTH"
    RUN = "RUN"


class BudgetBreach(enum.StrEnum):
    PAUSE = "PAUSE"
    CANCEL = "CANCEL"
    WARN = "WARN"


class Budget(Base):
    __tablename__ = "budgets"
    __table_args__ = (
        CheckConstraint("scope IN ('TENANT', 'AGENT', 'TAG', 'RUN')", name="scope"),
        CheckConstraint("period IN ('DAY', 'MONTH', 'RUN')", name="period"),
        CheckConstraint("on_breach IN ('PAUSE', 'CANCEL', 'WARN')", name="on_breach"),
        CheckConstraint("warn_at >= 0 AND warn_at <= 1", name="warn_at"),
        # one per (scope, target, period): setting it again updates it ('' for no target)
        Index("uq_budgets_scope", "tenant_id", "scope", "target", "period", unique=True),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    scope: Mapped[str] = mapped_column(String)
    target: Mapped[str] = mapped_column(server_default=text("''"))  # '' for TENANT and RUN
    period: Mapped[str] = mapped_column(String)
    limit_tokens: Mapped[int | None] = mapped_column(BigInteger)
    limit_usd: Mapped[Decimal | None] = mapped_column(Numeric)
    warn_at: Mapped[float] = mapped_column(server_default=text("0.8"))
    on_breach: Mapped[str] = mapped_column(String, server_default=text("'PAUSE'"))
    created_at: Mapped[datetime] = now_default()
    updated_at: Mapped[datetime] = now_default()


class BudgetPeriodUsage(Base):
    """What one UTC day or month recorded against a budget (its steps' usage, when each
    completed), the models it could not price, and whether its warning was given."""

    __tablename__ = "budget_periods"

    budget_id: Mapped[UUID] = mapped_column(
        ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True
    )
    period_start: Mapped[datetime] = mapped_column(primary_key=True)
    spent_tokens: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    spent_usd: Mapped[Decimal] = mapped_column(Numeric, server_default=text("0"))
    unpriced_models: Mapped[list[str]] = mapped_column(ARRAY(String), server_default=text("'{}'"))
    warned_at: Mapped[datetime | None]


class BudgetReservation(Base):
    """A step's expected usage, held against one budget from its start to its commit."""

    __tablename__ = "budget_reservations"
    __table_args__ = (Index("ix_budget_reservations_run", "run_id", "attempt"),)

    budget_id: Mapped[UUID] = mapped_column(
        ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True
    )
    run_id: Mapped[UUID] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(primary_key=True)  # the step's name and occurrence
    occurrence: Mapped[int] = mapped_column(primary_key=True)
    attempt: Mapped[int]  # counts while this attempt holds the run RUNNING
    tokens: Mapped[int] = mapped_column(BigInteger)
    usd: Mapped[Decimal] = mapped_column(Numeric)
    created_at: Mapped[datetime] = now_default()
