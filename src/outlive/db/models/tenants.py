"""Tenants, their users and API tokens (only a SHA-256 of a token is stored)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from sqlalchemy import ForeignKey, Index, LargeBinary, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[UUID] = uuid_pk()
    slug: Mapped[str] = mapped_column(unique=True)
    name: Mapped[str]
    created_at: Mapped[datetime] = now_default()
    # Per-tenant caps (`outlive tenant set-limits`); NULL: the deployment's default.
    max_running_runs: Mapped[int | None]
    max_inflight_jobs: Mapped[int | None]
    # Its own rate of the `llm` named limit, "N/S" (NULL: a share of the global one).
    llm_rate: Mapped[str | None]
    # Its own token rate of the `llm` limit, "N/S" (NULL: a share of OUTLIVE_LIMIT_LLM_TOKENS).
    llm_token_rate: Mapped[str | None]


class User(Base):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("tenant_id", "email"),)

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    email: Mapped[str]
    created_at: Mapped[datetime] = now_default()


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (
        Index(
            "ix_api_tokens_parent_id", "parent_id", postgresql_where=text("parent_id IS NOT NULL")
        ),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    user_id: Mapped[UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[bytes] = mapped_column(LargeBinary, unique=True)
    created_at: Mapped[datetime] = now_default()
    expires_at: Mapped[datetime | None]  # None: never; the token stops working at this instant
    revoked_at: Mapped[datetime | None]  # set once by `outlive token revoke`, never cleared
    # A run read token (`createRunReadToken`): reads this one run only, and dies with `parent_id`.
    run_id: Mapped[UUID | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    parent_id: Mapped[UUID | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"))
