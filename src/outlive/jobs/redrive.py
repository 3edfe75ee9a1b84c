"""Poison messages, looked at and sent again: `outlive jobs rejected` and `outlive jobs redrive`.

A rejected job's recorded body is parsed again against today's envelopes, exactly as the consumer
would. Valid now (a type that has since been deployed, a payload model that was fixed): it is
queued again as a new envelope (a fresh id, so saq does not take it for the old job) with the same
type and payload, after the commit that marks the row `redriven_at`. Still invalid: it is not
sent at all (the producer validates before anything is sent), the row records the new error and
counts the try, and it stays listed, so a redrive never loops through the queue. Each row is its
own unit of work under a row lock: two redrives at once never send one twice.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from pydantic import ValidationError
from sqlalchemy import func, select, text

from outlive.db.models import RejectedJob
from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import OnUnavailable, Sessions, UnitOfWork
from outlive.jobs.envelopes import ENVELOPES, EnvelopeTypes
from outlive.telemetry import metrics

log = logging.getLogger(__name__)

MAX_LIST = 1000


@dataclass(frozen=True, slots=True)
class RejectedRecord(Record):
    id: UUID
    type: str | None
    error: str
    received_at: datetime
    redrive_attempts: int
    last_redrive_at: datetime | None
    redriven_at: datetime | None
    redriven_as: UUID | None


@dataclass(frozen=True, slots=True)
class Redriven:
    id: UUID
    sent_as: UUID | None  # the new envelope's id; None when it is still invalid (or was taken)
    error: str | None = None

    @property
    def result(self) -> str:
        return "sent" if self.sent_as else "invalid" if self.error else "skipped"


_REJECTED = prepare(
    text(
        "SELECT * FROM rejected_jobs"
        " WHERE (CAST(:include_redriven AS boolean) OR redriven_at IS NULL)"
        " ORDER BY received_at DESC, id LIMIT :limit"
    ).columns(*RejectedJob.__table__.c)
)
_PENDING_IDS = prepare(
    text("SELECT id FROM rejected_jobs WHERE redriven_at IS NULL ORDER BY received_at, id")
)


async def list_rejected(
    sessions: Sessions, *, include_redriven: bool = False, limit: int = 50
) -> list[RejectedRecord]:
    """Newest first; by default only those not redriven yet."""
    rows = await sessions.all(
        _REJECTED, include_redriven=include_redriven, limit=max(0, min(limit, MAX_LIST))
    )
    return [RejectedRecord.from_row(r) for r in rows]


async def pending_ids(sessions: Sessions) -> list[UUID]:
    """Every rejected job not redriven yet, oldest first."""
    return [UUID(str(r["id"])) for r in await sessions.all(_PENDING_IDS)]


def envelope_text(body: str) -> str:
    """The envelope inside a recorded body (which may be the saq arguments around it)."""
    try:
        raw = json.loads(body)
    except ValueError:
        return body
    if isinstance(raw, dict) and isinstance(raw.get("body"), str):
        return str(raw["body"])
    return body


async def redrive(sessions: Sessions, job_id: UUID, types: EnvelopeTypes = ENVELOPES) -> Redriven:
    """Re-validate one rejected job and, when valid now, send it again (after the commit)."""
    async with sessions.unit() as uow:
        row = await uow.session.scalar(
            select(RejectedJob)
            .where(RejectedJob.id == job_id, RejectedJob.redriven_at.is_(None))
            .with_for_update(skip_locked=True)
        )
        if row is None:
            return Redriven(job_id, None)
        row.redrive_attempts += 1
        row.last_redrive_at = func.now()
        try:
            envelope = types.parse(envelope_text(row.body))
        except (ValidationError, ValueError) as exc:
            row.error = str(exc)[:4000]  # recorded again; not sent, so it cannot loop
            metrics.JOBS_REDRIVEN.labels("invalid").inc()
            return Redriven(job_id, None, row.error.splitlines()[0])
        sent = uow.enqueue(
            envelope.type,
            envelope.payload.model_dump(by_alias=True, mode="json"),
            on_unavailable=_undo(job_id),
        )
        row.redriven_at = func.now()
        row.redriven_as = sent.id
    metrics.JOBS_REDRIVEN.labels("sent").inc()
    log.info("redrove rejected job %s as %s %s", job_id, envelope.type, sent.id)
    return Redriven(job_id, sent.id)


def _undo(job_id: UUID) -> OnUnavailable:
    async def record(uow: UnitOfWork) -> None:
        row = await uow.session.get(RejectedJob, job_id, with_for_update=True)
        if row is not None:
            row.redriven_at = None
            row.redriven_as = None
            row.error = "queue unavailable at redrive; " + row.error

    return record
