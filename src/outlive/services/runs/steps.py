"""The durable-step journal: record a completed step, load a run's journal, list its steps.

A step (`ctx.step(name, fn)`, `outlive.workflows.runs`) is keyed by (run, name, occurrence). Its
completion is one statement (`queries.STEP_DONE`), fenced on the attempt: the journal row, the
events the step emitted while it ran, and its `step` event `{name, occurrence}`, all or nothing.
A later attempt loads the whole journal in one statement (`load_journal`) and answers every
step found there from memory. That load is bounded (`OUTLIVE_RUN_JOURNAL_MAX_BYTES`): rows past
the bound are never sent, and a journal over it fails the run (`JournalTooLarge`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from outlive.db.tx import Db, Unit
from outlive.errors import BadUserInput, JournalTooLarge
from outlive.ids import RunId
from outlive.services import blobs, sealing
from outlive.services.runs import step_queries as queries
from outlive.services.runs.moves import move_run
from outlive.services.runs.records import RunRecord, StepRecord, to_step
from outlive.services.usage_tokens import StepUsage

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# A step's result, serialized: inline in the journal up to `OUTLIVE_BLOB_THRESHOLD_BYTES`
# (256 KiB), stored once in `blobs` above it (`outlive.services.blobs`), refused above this.
MAX_STEP_BYTES = 16 * 1024 * 1024
MAX_STEP_NAME = 200
MAX_STEPS_PAGE = 1000
MAX_JOURNAL_BYTES = 64 * 1024 * 1024  # `OUTLIVE_RUN_JOURNAL_MAX_BYTES`'s default

Journal = dict[tuple[str, int], str]  # (name, occurrence) -> the result, as JSON text


async def record_step(
    uow: Unit,
    run_id: RunId,
    *,
    attempt: int,
    lease_s: float,
    name: str,
    occurrence: int,
    result: str,
    events: Sequence[Mapping[str, Any]] = (),
    usage: StepUsage | None = None,
    started_at: datetime | None = None,
    called: bool = False,
    code_version: str | None = None,
) -> RunRecord | None:
    """Record the step's `result` (JSON text) with `events` ({type, data}, emitted while it ran)
    and its `step` event, extending the attempt's lease: the run as it is now, or None when
    `attempt` no longer holds the run (nothing was written). Nudges `run.event` once per event
    appended, as any other append does. `called`: the step made model calls (`calls.begin_call`),
    settled by this record. `code_version`: the agent's code that recorded it."""
    timeline = [*events, {"type": "step", "data": {"name": name, "occurrence": occurrence}}]
    run = await move_run(
        uow,
        queries.STEP_DONE_CALLED if called else queries.STEP_DONE,
        run_id=run_id,
        attempt=attempt,
        lease=lease_s,
        name=name,
        occurrence=occurrence,
        result=result,
        events=json.dumps(timeline),
        requests=usage.requests if usage else 0,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        model=usage.model if usage else None,
        cost_usd=None if usage is None or usage.cost_usd is None else str(usage.cost_usd),
        started_at=started_at,
        code_version=code_version,
    )
    if run is not None:  # one `run.event` per event appended (`move_run` sent the first)
        for _ in timeline[1:]:
            uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    return run


async def copy_steps(uow: Unit, *, from_run: RunId, to_run: RunId) -> int:
    """Give the new run `to_run` a copy of `from_run`'s journal (`retryRun(reuseSteps: true)`),
    in one statement: its first attempt resumes at the first step the old run did not finish.
    The copied steps carry no usage. The number of steps copied."""
    row = await uow.one(queries.COPY_STEPS, from_run=from_run, to_run=to_run)
    await blobs.copy_refs(uow, from_run=from_run, to_run=to_run)  # its large results too
    return 0 if row is None else int(row["step_seq"])


async def load_journal(
    db: Db,
    run_id: RunId,
    *,
    max_bytes: int = MAX_JOURNAL_BYTES,
    versions: set[str | None] | None = None,
) -> tuple[Journal, int]:
    """Every step the run has recorded, in completion order, in one statement, and their
    results' bytes. `JournalTooLarge` when they are over `max_bytes` (at most one row past it
    was read). `versions`, when given, gets the code versions that recorded them."""
    rows = await db.all(queries.JOURNAL, run_id=run_id, max_bytes=max_bytes)
    size = int(rows[-1]["upto"]) if rows else 0
    if size > max_bytes:
        raise JournalTooLarge(journal_too_large(size, max_bytes))
    if versions is not None:
        versions.update(row["code_version"] for row in rows)
    return {(row["name"], row["occurrence"]): row["result"] for row in rows}, size


def journal_too_large(size: int, max_bytes: int) -> str:
    return (
        f"the run's step journal would hold {size} bytes of results, over"
        f" OUTLIVE_RUN_JOURNAL_MAX_BYTES ({max_bytes}); every attempt loads it whole: record"
        " fewer or smaller steps (store big values elsewhere and return a reference)"
    )


def check_steps_page(first: int) -> None:
    if not 0 <= first <= MAX_STEPS_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_STEPS_PAGE}")


async def step_results(
    db: Db, keys: Sequence[tuple[RunId, int]], *, cipher: AESGCM | None = None
) -> dict[tuple[RunId, int], Any]:
    """The recorded result of each (run, step seq), decoded from the journal's JSON (one
    statement); a step not found is absent. The runs were read tenant-scoped by the caller;
    `cipher`: their tenant's data key, when it encrypts (`services.sealing`)."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = await db.all(
        queries.STEP_RESULTS, run_ids=[run for run, _ in wanted], seqs=[seq for _, seq in wanted]
    )
    return {
        (RunId(row["run_id"]), row["seq"]): json.loads(sealing.open_text(cipher, row["result"]))
        for row in rows
    }


async def list_steps_of_runs(
    db: Db, run_ids: Sequence[RunId], *, after: int, first: int
) -> dict[RunId, list[StepRecord]]:
    """Each run's completed steps with seq > `after`, in completion order, at most `first` each
    (one statement). The runs were read tenant-scoped by the caller."""
    check_steps_page(first)
    found: dict[RunId, list[StepRecord]] = {run_id: [] for run_id in run_ids}
    rows = await db.all(
        queries.STEPS_OF_RUNS, run_ids=list(dict.fromkeys(run_ids)), after=after, first=first
    )
    for row in rows:
        found[RunId(row["run_id"])].append(to_step(row))
    return found
