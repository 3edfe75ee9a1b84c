"""One attempt of a run: claim, execute, finish.

The workflow engine (saq, through `outlive.jobs.run_instances`) calls `run_attempt` once per
delivery of the run's instance. What happens to the attempt is decided here:

- nothing to claim: the run was cancelled or settled before this attempt (return quietly), or
  another attempt holds it under a live lease and its worker process is alive (a second delivery
  of the same run: come back when that lease would have expired, without using up one of saq's
  attempts; should that process die meanwhile, the relay makes this delivery due at once);
- a cancel already requested, or the lost-worker budget spent (the claim took over the expired
  lease of a worker that died, `MAX_LOST_ATTEMPTS` times, counting only the lost attempts that
  completed no step since their claim: a run that makes progress is never failed for it): settle;
- execute the agent under `OUTLIVE_RUN_TIMEOUT_S`, heartbeating meanwhile: every third of
  `OUTLIVE_RUN_HEARTBEAT_S` the row's lease is extended (and saq's job touched); a heartbeat that
  finds the run taken over or settled stops the attempt at once;
- PostgreSQL unreachable (`ServiceUnavailable`): the attempt trusts no clock but its own
  monotonic one, and only from the START of its last heartbeat that succeeded (the lease the
  server granted runs from no earlier than that). When the next heartbeat could not be known to
  have landed before that lease could expire, the agent is cancelled and the attempt ends
  without settling: nobody else can claim the run before then, and once the lease has expired
  the next delivery takes it over (a `lost` attempt). A claim or a terminal write that cannot
  reach PostgreSQL is delivered again later, without using up one of saq's attempts; a terminal
  write is retried for up to a lease first (it is fenced on the attempt, so a late one is safe);
- success → SUCCEEDED; `RunCancelled` at a turn boundary → CANCELLED;
- `RunParked`: the agent parked the run WAITING (a durable sleep, a wait for a signal; see
  `outlive.services.waits`): the attempt ends without settling, and its worker slot is free;
- a retryable fault (or the timeout) with attempts left → back to QUEUED with a `retrying`
  event, and `RetryLater(delay)` tells the engine when to deliver the next attempt
  (`OUTLIVE_RUN_RETRY_DELAY_S`, doubling); with none left → FAILED. Attempts lost to a dead
  worker are counted apart (`lost_attempts`): a worker's death is not the agent's fault, so it
  does not use up one of the run's retries, but a run that keeps killing its worker still ends;
- any other exception → FAILED at once;
- the worker stopping (SIGTERM) → the run is released to QUEUED and the attempt given back, so a
  deploy never costs a run one of its retries.

Every terminal write is fenced on this attempt: a superseded attempt changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from outlive.db.models import RunStatus
from outlive.errors import (
    RetryableFault,
    RetryAfter,
    RunCancelled,
    RunParked,
    RunSuperseded,
    ServiceUnavailable,
)
from outlive.ids import RunId
from outlive.services import blobs
from outlive.services.runs import (
    MAX_ATTEMPTS,
    MAX_LOST_ATTEMPTS,
    RunRecord,
    agent_of,
    barren_losses,
    claim_run,
    lease_left,
    requeue_run,
    settle_run,
)
from outlive.telemetry import genai, logs
from outlive.telemetry.logs import ExpectedRetry
from outlive.workflows.context import AttemptContext
from outlive.workflows.deps import AttemptControl, WorkflowDeps
from outlive.workflows.leases import HEARTBEATS_PER_LEASE, Lease

__all__ = ["AttemptContext", "AttemptControl", "RetryLater", "WorkflowDeps", "run_attempt"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SETTLE_RETRY_S = 0.5  # a terminal write that found PostgreSQL unreachable is tried again this often


class RetryLater(ExpectedRetry):
    """Deliver this run's instance again after `delay_s` seconds. `counts` is False when the
    delivery did not execute the run (another attempt holds it): it must not use up one of the
    engine's attempts. A retry by design: logged as a WARNING (INFO when it did not count), never
    as an ERROR with a traceback (`outlive.telemetry.logs.ExpectedRetry`)."""

    def __init__(self, delay_s: float, reason: str, *, counts: bool = True) -> None:
        super().__init__(f"retry in {delay_s:g}s: {reason}")
        self.delay_s = delay_s
        self.counts = counts
        self.log_level = logging.WARNING if counts else logging.INFO


async def run_attempt(deps: WorkflowDeps, run_id: RunId, control: AttemptControl) -> None:
    try:
        await _attempt(deps, run_id, control)
    except ServiceUnavailable as exc:  # the row cannot be read or written now: come back later
        log.warning("run %s: PostgreSQL cannot be reached; delivered again later", run_id)
        raise RetryLater(exc.retry_after, "PostgreSQL cannot be reached", counts=False) from exc


async def _attempt(deps: WorkflowDeps, run_id: RunId, control: AttemptControl) -> None:
    if deps.agents.unavailable:  # some agent's code failed to load here: its runs wait
        await _not_unavailable(deps, run_id)
    claiming = time.monotonic()  # the lease runs from no earlier than this
    run = await _claim(deps, run_id, control)
    if run is None:
        await _not_claimed(deps, run_id)
        return
    if run.cancel_requested_at is not None:
        await _settle(deps, run, RunStatus.CANCELLED)
        return
    # Only a lost attempt that completed no step counts (cheap test first: all of them).
    if (
        run.lost_attempts >= MAX_LOST_ATTEMPTS
        and (barren := await barren_losses(deps.sessions, run.id)) >= MAX_LOST_ATTEMPTS
    ):
        error = (
            f"gave up: its worker was lost {barren} times without completing a step (the last "
            "one's process ended or its lease expired); a run that kills its worker is not"
            " retried forever"
        )
        await _settle(deps, run, RunStatus.FAILED, error=error)
        return
    agent = deps.agents.get(run.agent)
    if agent is None:
        await _settle(deps, run, RunStatus.FAILED, error=f"agent {run.agent!r} is not installed")
        return
    await _execute(deps, run, agent, control, since=claiming)


async def _not_unavailable(deps: WorkflowDeps, run_id: RunId) -> None:
    """A run of an agent whose code failed to load in this worker is not claimed: it stays
    QUEUED, using none of its attempts, and this delivery comes back later (a worker with the
    code fixed, or another worker, takes it then). Every other agent's runs go on."""
    agent = await agent_of(deps.sessions, run_id)
    if agent is None or agent not in deps.agents.unavailable:
        return
    delay = deps.settings.agent_unavailable_retry_s
    log.warning(
        "run %s: agent %r is unavailable here (%s); it waits, delivered again in %gs",
        run_id,
        agent,
        deps.agents.unavailable[agent],
        delay,
    )
    raise RetryLater(delay, f"agent {agent!r} is unavailable", counts=False)


async def _claim(deps: WorkflowDeps, run_id: RunId, control: AttemptControl) -> RunRecord | None:
    """The claim, carried to its end even when the worker stops meanwhile: a claim that commits
    while its attempt is being cancelled would leave the run RUNNING under a process about to
    end, to be taken over as lost. What a stopping worker claimed it releases at once."""

    async def claim() -> RunRecord | None:
        async with deps.sessions.unit(single_statement=True) as uow:
            return await claim_run(
                uow,
                run_id,
                lease_s=deps.lease_s,
                worker_id=deps.worker_id,
                versions=deps.agents.versions,
            )

    claiming = asyncio.ensure_future(claim())
    try:
        run = await asyncio.shield(claiming)
    except asyncio.CancelledError:
        await asyncio.wait({claiming})
        claimed = None if claiming.cancelled() or claiming.exception() else claiming.result()
        if claimed is not None and control.is_shutting_down():
            await asyncio.shield(_release(deps, claimed, control))
        raise
    if run is not None:  # the claim bound them in its own task's context
        logs.bind(tenant_id=run.tenant_id, run_id=run.id, agent=run.agent)
    return run


async def _to_the_end(write: Coroutine[Any, Any, T]) -> T:
    """A write carried to its end even when the attempt is cancelled meanwhile (the worker
    stops): cut off after PostgreSQL committed it but before the answer, it would leave the run
    RUNNING under a process about to end. The cancellation is raised once it has ended."""
    task = asyncio.ensure_future(write)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        raise


async def _not_claimed(deps: WorkflowDeps, run_id: RunId) -> None:
    """Nothing to claim. A settled (or cancelled) run: this delivery is done. A run held by
    another attempt under a live lease (the engine delivered it twice): come back when that lease
    would have expired, so that a holder that dies meanwhile is still taken over."""
    left = await lease_left(deps.sessions, run_id)
    if left is None:
        log.info("run %s: nothing to claim (cancelled or settled before this attempt)", run_id)
        return
    delay = max(left, 0.0) + deps.lease_s / HEARTBEATS_PER_LEASE
    log.info("run %s: held by another attempt; this delivery comes back in %.1fs", run_id, delay)
    raise RetryLater(delay, "another attempt holds the run's lease", counts=False)


async def _execute(
    deps: WorkflowDeps, run: RunRecord, agent: Any, control: AttemptControl, *, since: float
) -> None:
    context = AttemptContext(deps, run)
    lease = Lease(deps, run, control, since=since, cancelled=context.cancel_requested)
    unwatch = _watch_cancels(deps, run, context)
    try:
        async with lease.kept():
            async with asyncio.timeout(deps.settings.run_timeout_s):
                with genai.agent(
                    run.agent,
                    genai.conversation_id(run.key, run.id),
                    run_id=run.id,
                    attempt=run.attempt,
                    expected=(RunParked,),
                ):
                    await context.resume()
                    params = agent.parse(context.sealer.open(run.input))  # sealed: opened
                    output = await agent.run(context, params)
                    await context.ended()
        json.dumps(output)  # a result that is not JSON is the agent's bug, not a retry's
        output = context.sealer.seal(output)  # a tenant that encrypts: stored sealed
    except RunCancelled as cancelled:  # a budget's cancel says why (`cancelled` has no text)
        await _settle(deps, run, RunStatus.CANCELLED, error=str(cancelled) or None)
    except RunParked as parked:
        log.info("%s; attempt %s ends, its worker slot is free", parked, run.attempt)
        control.parked()
    except RunSuperseded as exc:
        log.warning("run %s: %s; this attempt stops", run.id, exc)
    except ServiceUnavailable:  # the agent's own write could not reach PostgreSQL
        lease.expiring = True
        raise  # `run_attempt`: delivered again later; the next attempt takes over the lease
    except (RetryableFault, TimeoutError) as fault:
        await _retry_or_fail(deps, run, fault)
    except asyncio.CancelledError:
        if lease.lost:  # taken over or settled elsewhere: this cancellation was ours; stop quietly
            _uncancel()
            log.warning("run %s: attempt %s lost its lease; it stops", run.id, run.attempt)
            return
        if lease.expiring:  # PostgreSQL unreachable: stopped before the lease could expire
            _uncancel()
            raise ServiceUnavailable("the attempt stopped: its lease could not be kept") from None
        if control.is_shutting_down():
            await asyncio.shield(_release(deps, run, control))
        raise
    except Exception as exc:  # noqa: BLE001 (any other fault settles the run FAILED at once)
        await _settle(deps, run, RunStatus.FAILED, error=_describe(exc))
    else:
        await _settle(deps, run, RunStatus.SUCCEEDED, output=output)
    finally:
        unwatch()


def _watch_cancels(
    deps: WorkflowDeps, run: RunRecord, context: AttemptContext
) -> Callable[[], None]:
    """A cancel request of the run reaches the attempt as soon as it commits (the worker LISTENs
    for it); without that, the heartbeat finds it."""
    if deps.cancels is None:
        return lambda: None
    return deps.cancels.watch(run.id, context.cancel_requested)


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def _settle(
    deps: WorkflowDeps,
    run: RunRecord,
    status: RunStatus,
    *,
    output: Any = None,
    error: str | None = None,
) -> None:
    """The terminal write, fenced on this attempt, carried to its end (`_to_the_end`).
    PostgreSQL unreachable: tried again for up to a lease (a late write is still fenced), then
    `ServiceUnavailable` (delivered again later)."""
    await _to_the_end(_settle_now(deps, run, status, output=output, error=error))


async def _settle_now(
    deps: WorkflowDeps, run: RunRecord, status: RunStatus, *, output: Any, error: str | None
) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deps.lease_s
    while True:
        try:
            stored = await blobs.store(  # a large output is stored once, apart
                deps.sessions,
                run.tenant_id,
                run.id,
                output,
                threshold=deps.settings.blob_threshold_bytes,
            )
            async with deps.sessions.unit(run.tenant_id, single_statement=True) as uow:
                settled = await settle_run(
                    uow, run.id, status, output=stored, error=error, attempt=run.attempt
                )
            break
        except ServiceUnavailable:
            if loop.time() + SETTLE_RETRY_S > give_up:
                raise
            await asyncio.sleep(SETTLE_RETRY_S)  # a duration: PostgreSQL announces no return
    if settled is None:
        log.warning(
            "run %s: attempt %s could not settle %s (superseded)", run.id, run.attempt, status
        )


async def _retry_or_fail(deps: WorkflowDeps, run: RunRecord, fault: Exception) -> None:
    error = _describe(fault) if str(fault) else f"timed out after {deps.settings.run_timeout_s:g}s"
    # Attempts that reached a verdict, this one too: neither a lost worker's attempts nor the
    # claims that resumed the run from WAITING are retries.
    executed = run.attempt - run.lost_attempts - run.resumes
    if executed >= MAX_ATTEMPTS:
        lost = f"; {run.lost_attempts} more lost their worker" if run.lost_attempts else ""
        await _settle(
            deps, run, RunStatus.FAILED, error=f"{error} (after {executed} attempts{lost})"
        )
        return
    delay = deps.settings.run_retry_delay_s * 2 ** (executed - 1)
    if isinstance(fault, RetryAfter):  # the fault said when: not sooner
        delay = max(delay, fault.seconds)

    async def requeue() -> RunRecord | None:
        async with deps.sessions.unit(run.tenant_id) as uow:
            return await requeue_run(
                uow, run, event="retrying", data={"delayS": delay, "error": error}
            )

    if await _to_the_end(requeue()) is not None:
        raise RetryLater(delay, error)


async def _release(deps: WorkflowDeps, run: RunRecord, control: AttemptControl) -> None:
    try:
        async with deps.sessions.unit(run.tenant_id) as uow:
            released = await requeue_run(
                uow,
                run,
                event="released",
                data={"reason": "worker shutdown"},
                give_back_attempt=True,
            )
    except Exception:
        log.exception("run %s: could not release at shutdown; it will be re-claimed", run.id)
        return
    if released is not None:
        control.give_back_attempt()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
