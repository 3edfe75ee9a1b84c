"""Data governance (contract §7 "Retention and erasure"): what deleted runs leave behind, the
record of each erasure, and large payloads stored once.

- `usage_kept_runs` / `usage_kept_tokens`: what the runs that retention or `eraseSubject`
  deleted counted towards `usage` and `usageTokens`, folded in by the statement that deletes
  them, so usage totals never change when runs go.
- `erasures`: one row per `eraseSubject` (who, when, which tag, the counts): never the content.
- `blobs`: step results, run inputs and outputs and signal payloads over
  `OUTLIVE_BLOB_THRESHOLD_BYTES`, content-addressed per tenant (sha256) so a value stored by
  many runs is stored once; `blob_refs` says which runs hold each (deleted with the run), and a
  blob nobody holds any more is deleted (`outlive.services.blobs.sweep`).
"""

from datetime import date, datetime
from decimal import Decimal
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    LargeBinary,
    Numeric,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default, uuid_pk


class UsageKeptRuns(Base):
    """Deleted runs per tenant, UTC day of creation, agent and status (as `usage_daily`)."""

    __tablename__ = "usage_kept_runs"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[date] = mapped_column(primary_key=True)
    agent: Mapped[str] = mapped_column(primary_key=True)
    status: Mapped[str] = mapped_column(primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


class UsageKeptTokens(Base):
    """The model usage deleted steps recorded, per tenant, UTC day of completion, agent and
    model ('' for a step that named none); `cost_usd` sums the priced steps, `unpriced` counts
    the steps that recorded requests without a price."""

    __tablename__ = "usage_kept_tokens"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[date] = mapped_column(primary_key=True)
    agent: Mapped[str] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric)
    unpriced: Mapped[int] = mapped_column(BigInteger)


class Erasure(Base):
    """One `eraseSubject`: who asked (the member's email, or `cli` for an operator), when,
    which tag, and what it deleted. Never what it deleted was."""

    __tablename__ = "erasures"
    __table_args__ = (Index("ix_erasures_tenant_newest", "tenant_id", text("at DESC")),)

    id: Mapped[UUID] = uuid_pk()
    tenant_id: Mapped[UUID] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    tag: Mapped[str]
    by: Mapped[str]
    at: Mapped[datetime] = now_default()
    finished_at: Mapped[datetime | None]
    runs: Mapped[int] = mapped_column(server_default=text("0"))
    steps: Mapped[int] = mapped_column(server_default=text("0"))
    events: Mapped[int] = mapped_column(server_default=text("0"))
    signals: Mapped[int] = mapped_column(server_default=text("0"))
    deliveries: Mapped[int] = mapped_column(server_default=text("0"))
    blobs: Mapped[int] = mapped_column(server_default=text("0"))


class Blob(Base):
    """A large payload, stored once per tenant and content (its sha256); its bytes are in
    `blob_parts`. `created_at` is touched by every writer that finds it already there."""

    __tablename__ = "blobs"

    tenant_id: Mapped[UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    sha256: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = now_default()


class BlobPart(Base):
    """A blob's bytes, `PART_BYTES` a row: each row fills one heap page and is never TOASTed
    (`toast_tuple_target` 8160, set by the migration), so a blob costs its bytes plus about 2%,
    where one TOASTed column costs about 4% (2 KB chunks and their index); a ranged read reads
    only the rows it covers."""

    __tablename__ = "blob_parts"
    __table_args__ = (
        ForeignKeyConstraint(
            ["tenant_id", "sha256"], ["blobs.tenant_id", "blobs.sha256"], ondelete="CASCADE"
        ),
    )

    tenant_id: Mapped[UUID] = mapped_column(primary_key=True)
    sha256: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    part: Mapped[int] = mapped_column(primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class BlobRef(Base):
    """A run holds a blob (its input, output, a step's result or a signal's payload)."""

    __tablename__ = "blob_refs"
    __table_args__ = (Index("ix_blob_refs_blob", "tenant_id", "sha256"),)

    run_id: Mapped[UUID] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    sha256: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    tenant_id: Mapped[UUID]
