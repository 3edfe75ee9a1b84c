"""The consumer: parse the envelope first, then dispatch on its type to one handler.

- Not a valid envelope (bad JSON, unknown type, a payload that fails its model, arguments saq
  should never have carried): a poison message. It is logged, recorded in `rejected_jobs` (type,
  raw body, validation error, received_at) and acknowledged, never retried: a retry cannot make
  it valid.
- A handler that raises is retried after `OUTLIVE_JOB_RETRY_BASE_S`, doubling exactly up to
  `OUTLIVE_JOB_RETRY_MAX_S` (saq's `retry_backoff` adds full jitter, so the delay is set here),
  until `OUTLIVE_JOB_MAX_ATTEMPTS` (the consumer's setting, whatever the producer stamped);
  then the handler's `give_up` settles its row as failed.

Each message opens and closes its own database sessions (inside the handler) and awaits every
operation: nothing is deferred past the end of the message. While a handler runs, the consumer
touches its job every third of `OUTLIVE_RUN_HEARTBEAT_S`, so the queue's sweep re-delivers the job
of a worker that died soon after, and never the job of a live one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from outlive.config import Settings
from outlive.db.models import RejectedJob
from outlive.jobs.deps import JobDeps, JobsContext
from outlive.jobs.envelopes import Envelope
from outlive.jobs.telemetry import attempt_span, remember_first_attempt
from outlive.telemetry import logs, metrics, tracing

log = logging.getLogger(__name__)

MAX_RECORDED_BODY = 64 * 1024


class RetryJob(logs.ExpectedRetry):
    """A handler's failure that the queue retries, by design: said once, as the consumer's own
    WARNING, never as saq's ERROR with a traceback (saq's record of it is INFO)."""

    log_level = logging.INFO


def retry_delay(settings: Settings, attempt: int) -> float:
    """The delay after failed attempt `attempt` (1-based): base, doubling, capped."""
    return float(min(settings.job_retry_base_s * 2 ** (attempt - 1), settings.job_retry_max_s))


async def consume(ctx: JobsContext, **kwargs: Any) -> None:
    deps = ctx["outlive"].jobs
    job = ctx["job"]
    logs.bind(job_id=job.key, tenant_id=None, run_id=None, agent=None)
    body = kwargs.get("body")
    try:
        if set(kwargs) != {"body"} or not isinstance(body, str):
            raise ValueError(f"a job carries exactly one str argument `body`, not {sorted(kwargs)}")
        envelope = deps.types.parse(body)
    except (ValidationError, ValueError) as exc:
        raw = body if isinstance(body, str) and set(kwargs) == {"body"} else _dump(kwargs)
        await _reject(deps, raw, exc)
        return
    logs.bind(job_id=envelope.id)
    if job.attempts <= 1:
        waited = (datetime.now(UTC) - envelope.enqueued_at).total_seconds()
        metrics.JOB_QUEUE_WAIT.labels(envelope.type).observe(max(0.0, waited))
    began = time.perf_counter()
    with attempt_span(job, f"{envelope.type} process", envelope.traceparent) as span:
        remember_first_attempt(job)
        try:
            await _handle(deps, job, envelope)
        except Exception as exc:
            tracing.fail(span, exc)
            raise
        finally:
            metrics.JOB_DURATION.labels(envelope.type).observe(time.perf_counter() - began)


async def _handle(deps: JobDeps, job: Any, envelope: Envelope) -> None:
    handler = deps.handlers[envelope.type]
    try:
        async with _heartbeating(job, every_s=deps.settings.run_heartbeat_s / 3):
            await handler.handle(deps, envelope.payload)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        if job.attempts >= min(job.retries, deps.settings.job_max_attempts):
            job.retries = job.attempts  # the consumer's limit is the one that holds
            metrics.JOBS.labels(envelope.type, "failed").inc()
            log.error(
                "job %s %s failed for good after %s attempts: %s",
                envelope.type,
                envelope.id,
                job.attempts,
                error,
            )
            await handler.give_up(deps, envelope.payload, error)
        else:
            metrics.JOBS.labels(envelope.type, "retrying").inc()
            job.retry_delay = retry_delay(deps.settings, job.attempts)
            log.warning(
                "job %s %s attempt %s failed (%s); retrying in %gs",
                envelope.type,
                envelope.id,
                job.attempts,
                error,
                job.retry_delay,
            )
            await _tell_retrying(deps, handler, envelope, job.retry_delay)
            raise RetryJob(f"{error}; retrying in {job.retry_delay:g}s") from exc
        raise
    metrics.JOBS.labels(envelope.type, "succeeded").inc()


async def _tell_retrying(deps: JobDeps, handler: Any, envelope: Envelope, delay_s: float) -> None:
    """The handler's `retrying` hook, if it has one; its failure never stops the retry."""
    if handler.retrying is None:
        return
    try:
        await handler.retrying(deps, envelope.payload, delay_s)
    except Exception:
        log.warning("job %s: could not record its next attempt", envelope.id, exc_info=True)


@asynccontextmanager
async def _heartbeating(job: Any, *, every_s: float) -> AsyncIterator[None]:
    async def beat() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                async with asyncio.timeout(every_s):
                    await job.update()
            except Exception:
                log.warning("job %s: heartbeat failed", job.key, exc_info=True)

    beating = asyncio.create_task(beat())
    try:
        yield
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)


def _dump(kwargs: dict[str, Any]) -> str:
    return json.dumps(kwargs, default=str)


async def _reject(deps: JobDeps, body: str, exc: Exception) -> None:
    kind = None
    try:
        raw = json.loads(body)
        if isinstance(raw, dict) and isinstance(raw.get("body"), str):
            raw = json.loads(raw["body"])  # saq arguments around an envelope
        if isinstance(raw, dict) and isinstance(raw.get("type"), str):
            kind = raw["type"][:200]
    except ValueError:
        pass
    error = str(exc)[:4000]
    metrics.JOBS_REJECTED.labels(metrics.known_label(kind or "", deps.types.payloads)).inc()
    log.error("rejected a poison job (type %r): %s", kind, error.splitlines()[0])
    async with deps.sessions.unit() as uow:
        uow.session.add(RejectedJob(type=kind, body=body[:MAX_RECORDED_BODY], error=error))
