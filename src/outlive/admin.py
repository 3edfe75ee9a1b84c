"""Operator commands behind `outlive jobs rejected` and `outlive jobs redrive`: a composition
root of their own (an engine of one or two connections, the jobs queue), printing for people or,
with `--json`, one object per line."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any
from uuid import UUID

from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.errors import NotFound
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.queues import JOBS_QUEUE, create_queue
from outlive.jobs.redrive import RejectedRecord, list_rejected, pending_ids, redrive


def _line(r: RejectedRecord) -> str:
    error = r.error.splitlines()[0][:100] if r.error else ""
    done = f" redriven as {r.redriven_as}" if r.redriven_as else ""
    return (
        f"{r.id}  {r.received_at:%Y-%m-%d %H:%M:%S}  {r.type or '-':<24} "
        f"tries={r.redrive_attempts}{done}  {error}"
    )


async def print_rejected(
    settings: Settings, *, include_redriven: bool, limit: int, as_json: bool
) -> None:
    database_url, _ = settings.require_services()
    engine = create_engine(
        database_url, pool_size=1, max_overflow=0, statement_cache=not settings.db_pgbouncer
    )
    try:
        found = await list_rejected(
            create_sessions(engine, autocommit=not settings.db_pgbouncer),
            include_redriven=include_redriven,
            limit=limit,
        )
    finally:
        await engine.dispose()
    for record in found:
        text = json.dumps(dataclasses.asdict(record), default=str) if as_json else _line(record)
        print(text)  # noqa: T201
    if not as_json:
        print(f"{len(found)} rejected job(s)", file=sys.stderr)  # noqa: T201


async def redrive_rejected(settings: Settings, ids: list[UUID], *, every: bool) -> tuple[int, int]:
    """(still invalid, tried); prints one line per rejected job."""
    database_url, redis_url = settings.require_services()
    engine = create_engine(
        database_url, pool_size=1, max_overflow=1, statement_cache=not settings.db_pgbouncer
    )
    queue = create_queue(redis_url, JOBS_QUEUE)
    sessions = create_sessions(engine, autocommit=not settings.db_pgbouncer).wired(
        jobs=SaqJobProducer(queue, settings)
    )
    try:
        waiting = await pending_ids(sessions)
        missing = [str(i) for i in ids if i not in set(waiting)]
        if missing and not every:
            raise NotFound(f"no rejected job waiting for a redrive: {', '.join(missing)}")
        results = [await redrive(sessions, job_id) for job_id in (waiting if every else ids)]
    finally:
        await queue.disconnect()
        await engine.dispose()
    for r in results:
        print(_outcome(r))  # noqa: T201
    return sum(r.result == "invalid" for r in results), len(results)


def _outcome(r: Any) -> str:
    if r.result == "sent":
        return f"{r.id} sent again as {r.sent_as}"
    if r.result == "invalid":
        return f"{r.id} still invalid, recorded again: {r.error}"
    return f"{r.id} not redriven (already redriven, or another redrive has it)"
