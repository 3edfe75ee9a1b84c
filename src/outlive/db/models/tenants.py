"""Tenants, their users (members) and API tokens (only a SHA-256 of a token is stored)."""

import enum
from datetime import datetime
from uuid import UUID

from sqlalchemy import (
    CheckConstraint,
    ForeignKey,
    Index,
    LargeBinary,
    String,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class Role(enum.StrEnum):
    """What a member, and each of their tokens, may change (contract §3): `VIEWER` reads only;
    `OPERATOR` also acts on runs, replays and schedules; `ADMIN` also manages members,
    invitations, webhooks, budgets and data. A token acts with the lower of its own role and
    its member's (`effective`). The mutations each needs: `outlive.resolvers.roles`."""

    ADMIN = "ADMIN"
    OPERATOR = "OPERATOR"
    VIEWER = "VIEWER"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: "Role") -> bool:
        """This role may do what `needed` may."""
        return self.rank >= needed.rank

    @staticmethod
    def effective(token: "Role", member: "Role") -> "Role":
        return token if token.rank <= member.rank else member


_RANKS = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}
ROLE_CHECK = "role IN ('ADMIN', 'OPERATOR', 'VIEWER')"


class Tenant(Base):
    __tablename__ = "tenants"
    __table_args__ = (CheckConstraint("retention_days BETWEEN 1 AND 3650", name="retention_days"),)

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
    # `outlive tenant pause`: every run of the tenant is held (its runs carry paused_by 'tenant').
    paused_at: Mapped[datetime | None]
    # `setRetention`: its settled runs are kept this many days (NULL: OUTLIVE_RETENTION_DAYS).
    retention_days: Mapped[int | None]
    # Encryption at rest (`outlive tenant encrypt`): its data key, wrapped by the deployment's
    # OUTLIVE_ENCRYPTION_KEY (NULL: its payloads are stored as they are). services/sealing.py.
    data_key: Mapped[bytes | None]


class AgentPause(Base):
    """`pauseAgent`: the agent's runs of this tenant are held, and every new one."""

    __tablename__ = "agent_pauses"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    agent: Mapped[str] = mapped_column(primary_key=True)
    paused_at: Mapped[datetime] = now_default()


class User(Base):
    """A member of one tenant. Removing a member sets `removed_at` (and revokes their tokens);
    the row stays, so what they did keeps its author, and an invitation accepted later makes
    them a member again."""

    __tablename__ = "users"
    __table_args__ = (
        UniqueConstraint("tenant_id", "email"),
        CheckConstraint(ROLE_CHECK, name="role"),
    )

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    email: Mapped[str]
    created_at: Mapped[datetime] = now_default()
    role: Mapped[str] = mapped_column(String, server_default=Role.ADMIN.value)
    removed_at: Mapped[datetime | None]


class ApiToken(Base):
    __tablename__ = "api_tokens"
    __table_args__ = (
        Index(
            "ix_api_tokens_parent_id", "parent_id", postgresql_where=text("parent_id IS NOT NULL")
        ),
        Index(  # a deleted run's read tokens (retention, erasure): found, not scanned for
            "ix_api_tokens_run_id", "run_id", postgresql_where=text("run_id IS NOT NULL")
        ),
        CheckConstraint(ROLE_CHECK, name="role"),
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
    # The most it may do (`outlive token create --role`); it acts as the lower of this and its
    # member's role. Every token made before roles existed is ADMIN.
    role: Mapped[str] = mapped_column(String, server_default=Role.ADMIN.value)
