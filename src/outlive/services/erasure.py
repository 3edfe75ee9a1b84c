"""`eraseSubject(tag)`: delete everything the tenant keeps about the runs carrying a tag
(contract §7 "Retention and erasure").

In order: the tag's active runs are cancelled (`cancel_run`, as `cancelRun` does each: QUEUED
and WAITING ones settle at once, a RUNNING one stops at its next step, and is waited for up to
`settle_s`: a run whose worker does not answer by then is deleted all the same and its attempt's
writes find nothing). Then, `BATCH` runs at a time, their steps, events, signals and webhook
deliveries (bodies, attempts) are deleted in statements of at most `ROWS` rows each, then the
runs (their waits, calls and read tokens with them), then the blobs only they held, then what
Redis keeps of them (`Forget`: their queued jobs and stream buffers). Every statement is short
and commits on its own, so no lock is held long and an erasure that stops half way is finished
by calling it again; the batches are paced (`PACE`), so an erasure leaves the database to the
other tenants six sevenths of the time. The statements that delete steps and runs fold what
they counted into the kept usage (`outlive.services.kept_usage`): usage totals are unchanged.

The erasure covers the runs carrying the tag that were started before it began: one started
while it goes on is a new request of the subject's, neither cancelled nor deleted by it (call it
again). The receipt counts what this call deleted (a repeat finds nothing and counts 0). The call is
recorded in `erasures`: who, when, the tag and the counts, never what was erased. Children of a
tagged run that do not carry the tag themselves are cancelled with it (cascade) but not erased:
the tag is the subject's mark, and a caller that wants them erased tags them too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import ARRAY, Uuid, bindparam, text

from outlive.db.raw import Statement, prepare
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.services import blobs
from outlive.services.kept_usage import KEEP_RUNS, KEEP_STEPS, STEP_COLUMNS
from outlive.services.runs import cancel_run
from outlive.services.runs.keys import check_tags
from outlive.services.runs.page_queries import tags_match

BATCH = 100  # runs per round
PAGE = 10_000  # run ids looked up at once (one index scan of the tag's entries, then a sort)
ROWS = 5000  # rows per statement
# The erasure's batches take a seventh of one connection's time: after each it waits six times as
# long as it took. Other tenants' statements share the database's cores with it: unpaced, it went
# through 10,000 runs in 1.2 s and other tenants' startRun p99 rose 1.45x meanwhile; at 3, 4.6 s
# and 1.21x (1.07-1.31x); at 6, 8 s and 1.13x (1.02-1.13x) (bench/erasure.py, docs/governance.md).
# The contract's bound is 60 s for 10,000 runs.
PACE = 6.0
SETTLE_S = 10.0  # how long a RUNNING run that was asked to stop is waited for
POLL_S = 0.2

Forget = Callable[[Sequence[UUID]], Awaitable[None]]


async def forget_nothing(_: Sequence[UUID]) -> None:
    """The `Forget` of a process without Redis."""


@dataclass(frozen=True, slots=True)
class ErasureReceipt:
    tag: str
    runs: int
    steps: int
    events: int
    signals: int
    deliveries: int
    blobs: int
    at: datetime


def _ids(statement: str) -> Statement:
    return prepare(text(statement).bindparams(bindparam("ids", type_=ARRAY(Uuid()))))


# The runs of the erasure: the tenant's runs carrying the tag, started before it began (a run
# started while it goes on is a new request of the subject's, not the erasure's to cancel). The
# tag's match is the runs list's, so the lookup reads the GIN index `ix_runs_tenant_tags`.
_TAGGED = "tenant_id = :tenant_id AND created_at <= :began AND " + tags_match(
    "ARRAY[CAST(:tag AS varchar)]"
)
_TO_CANCEL = _ids(
    f"SELECT id FROM runs WHERE {_TAGGED} AND status IN ('QUEUED', 'RUNNING', 'WAITING')"  # noqa: S608
    " AND (status <> 'RUNNING' OR cancel_requested_at IS NULL) AND NOT (id = ANY(:ids))"
    " ORDER BY id LIMIT :batch"
)
_STILL_RUNNING = prepare(
    text(f"SELECT count(*) AS n FROM runs WHERE {_TAGGED} AND status = 'RUNNING'")  # noqa: S608
)
_NEXT = prepare(text(f"SELECT id FROM runs WHERE {_TAGGED} ORDER BY id LIMIT :batch"))  # noqa: S608
_STEPS = _ids(
    f"""WITH gone AS (
          DELETE FROM run_steps WHERE (run_id, name, occurrence) IN (
            SELECT run_id, name, occurrence FROM run_steps WHERE run_id = ANY(:ids) LIMIT :rows)
          RETURNING {STEP_COLUMNS}),
        owners AS (SELECT id, tenant_id, agent FROM runs WHERE id = ANY(:ids)),
        {KEEP_STEPS}
        SELECT count(*) AS n FROM gone"""  # noqa: S608 (constant fragments)
)
_EVENTS = _ids(
    "DELETE FROM run_events WHERE (run_id, seq) IN ("
    " SELECT run_id, seq FROM run_events WHERE run_id = ANY(:ids) LIMIT :rows)"
)
_SIGNALS = _ids(
    "DELETE FROM run_signals WHERE seq IN ("
    " SELECT seq FROM run_signals WHERE run_id = ANY(:ids) LIMIT :rows)"
)
_DELIVERIES = _ids(
    "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries"
    " WHERE run_id = ANY(:ids) AND tenant_id = :tenant_id LIMIT :rows)"
)
_RUNS = _ids(
    f"""WITH dead AS (DELETE FROM runs WHERE id = ANY(:ids) AND tenant_id = :tenant_id
                      RETURNING tenant_id, created_at, agent, status),
        {KEEP_RUNS}
        SELECT count(*) AS n FROM dead"""  # noqa: S608 (a constant fragment)
)
_NOW = prepare(text("SELECT now() AS began"))
_RECORD = prepare(
    text(
        """INSERT INTO erasures
             (tenant_id, tag, by, finished_at, runs, steps, events, signals, deliveries, blobs)
           VALUES (:tenant_id, :tag, :by, now(), :runs, :steps, :events, :signals, :deliveries,
                   :blobs)
           RETURNING at"""
    )
)


def check_tag(tag: str) -> str:
    (checked,) = check_tags([tag])  # one tag, shaped as startRun's are (BAD_USER_INPUT else)
    return checked


async def erase_subject(
    sessions: Sessions,
    tenant_id: UUID,
    tag: str,
    *,
    by: str,
    forget: Forget = forget_nothing,
    settle_s: float = SETTLE_S,
) -> ErasureReceipt:
    """Erase the tenant's runs carrying `tag` (see the module) and record it; the receipt.
    After each batch it waits `PACE` times as long as the batch took."""
    tag = check_tag(tag)
    now = await sessions.one(_NOW)
    began = now["began"] if now is not None else None
    await _cancel_active(sessions, tenant_id, tag, began, settle_s)
    counts = dict.fromkeys(("runs", "steps", "events", "signals", "deliveries", "blobs"), 0)
    while rows := await sessions.all(_NEXT, tenant_id=tenant_id, tag=tag, began=began, batch=PAGE):
        page = [row["id"] for row in rows]
        for start in range(0, len(page), BATCH):
            began_batch = time.perf_counter()
            done = await _erase_batch(sessions, tenant_id, page[start : start + BATCH], forget)
            await asyncio.sleep(PACE * (time.perf_counter() - began_batch))
            for name, got in done.items():
                counts[name] += got
    recorded = await sessions.one(_RECORD, tenant_id=tenant_id, tag=tag, by=by, **counts)
    if recorded is None:  # an INSERT ... RETURNING always returns its row
        raise RuntimeError("the erasure was not recorded")
    return ErasureReceipt(tag=tag, at=recorded["at"], **counts)


async def _cancel_active(
    sessions: Sessions, tenant_id: UUID, tag: str, began: datetime | None, settle_s: float
) -> None:
    tagged = {"tenant_id": tenant_id, "tag": tag, "began": began}
    asked: list[UUID] = []  # a run a cancel left as it was is asked once, never again
    while rows := await sessions.all(_TO_CANCEL, batch=BATCH, ids=asked, **tagged):
        async with sessions.unit(tenant_id) as uow:
            for row in rows:
                await cancel_run(uow, RunId(row["id"]), reason="eraseSubject: its data is erased")
                asked.append(row["id"])
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:  # a RUNNING run stops at its next step boundary
        running = await sessions.one(_STILL_RUNNING, **tagged)
        if running is None or running["n"] == 0:
            return
        await asyncio.sleep(POLL_S)


async def _erase_batch(
    sessions: Sessions, tenant_id: UUID, ids: list[UUID], forget: Forget
) -> dict[str, int]:
    held = await blobs.held_by(sessions, ids)
    counts = {
        "steps": await _drain_counted(sessions, _STEPS, ids=ids),
        "events": await _drain(sessions, _EVENTS, ids=ids),
        "signals": await _drain(sessions, _SIGNALS, ids=ids),
        "deliveries": await _drain(sessions, _DELIVERIES, ids=ids, tenant_id=tenant_id),
    }
    row = await sessions.one(_RUNS, ids=ids, tenant_id=tenant_id)
    counts["runs"] = 0 if row is None else int(row["n"])
    counts["blobs"] = await blobs.drop_unheld(sessions, tenant_id, held)
    await forget(ids)
    return counts


async def _drain(sessions: Sessions, statement: Statement, **params: object) -> int:
    total = 0
    while (deleted := await sessions.execute(statement, rows=ROWS, **params)) > 0:
        total += deleted
        if deleted < ROWS:
            break
    return total


async def _drain_counted(sessions: Sessions, statement: Statement, **params: object) -> int:
    total = 0
    while True:
        row = await sessions.one(statement, rows=ROWS, **params)
        deleted = 0 if row is None else int(row["n"])
        total += deleted
        if deleted < ROWS:
            return total
