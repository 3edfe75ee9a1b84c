"""One attempt of a run: claim, execute, finish.

The workflow engine (saq, through `outlive.jobs.run_instances`) calls `run_attempt` once per
delivery of the run's instance. What happens to the attempt is decided here:

- nothing to claim: the run was cancelled or settled before this attempt (return quietly), or
  another attempt holds it under a live lease (a second delivery of the same run: come back
  when that lease would have expired, without using up one of saq's attempts);
- a cancel already requested, or the lost-worker budget spent (the claim took over the expired
  lease of a worker that died, `MAX_LOST_ATTEMPTS` times): settle;
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
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar, overload

import httpx

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.errors import (
    RetryableFault,
    RunCancelled,
    RunParked,
    RunSuperseded,
    ServiceUnavailable,
)
from outlive.ids import RunId, TenantId
from outlive.services import waits
from outlive.services.runs import (
    MAX_ATTEMPTS,
    MAX_LOST_ATTEMPTS,
    RunRecord,
    append_event,
    claim_run,
    heartbeat,
    lease_left,
    read_run,
    requeue_run,
    settle_run,
)
from outlive.telemetry.logs import ExpectedRetry
from outlive.workflows.steps import StepJournal, buffered_events

log = logging.getLogger(__name__)

CANCEL_POLL_S = 1.0  # how often a sleeping agent looks for a cancel request
# A sleep this short or shorter is slept in-process (parking and waking costs more than it
# saves, and holds the slot for at most this long); a longer one parks the run WAITING.
DURABLE_SLEEP_MIN_S = 1.0
HEARTBEATS_PER_LEASE = 3  # a heartbeat every third of the lease
BEAT_TIMEOUT_SHARE = 0.5  # a heartbeat not done within half its period counts as failed
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


class AttemptControl(Protocol):
    """What the engine offers an executing attempt."""

    async def heartbeat(self) -> None:
        """Tell the engine this attempt is alive (a missed heartbeat gets it re-delivered)."""

    def is_shutting_down(self) -> bool:
        """True when this worker is stopping gracefully (as opposed to the attempt aborted)."""

    def give_back_attempt(self) -> None:
        """The engine should not count this delivery against the instance's retries."""


@dataclass
class WorkflowDeps:
    sessions: Sessions
    agents: AgentRegistry
    http: httpx.AsyncClient
    settings: Settings

    @property
    def lease_s(self) -> float:
        """How long an attempt holds its run without a heartbeat."""
        return self.settings.run_heartbeat_s


T = TypeVar("T")


class AttemptContext:
    """The `RunContext` an agent receives; every write is fenced on this attempt."""

    def __init__(self, deps: WorkflowDeps, run: RunRecord) -> None:
        self.run_id: RunId = run.id
        self.tenant_id: TenantId = run.tenant_id
        self.attempt = run.attempt
        self.http = deps.http
        self.settings = deps.settings
        self._sessions = deps.sessions
        self._lease_s = deps.lease_s
        self._fresh: RunRecord | None = run  # the row as this attempt last wrote it
        self._steps = StepJournal(deps.sessions, run, lease_s=deps.lease_s, recorded=self._moved)
        self._occurrences: Counter[tuple[str, str]] = Counter()  # sleeps and waits, so far

    def _moved(self, run: RunRecord) -> None:
        self._fresh = run

    async def resume(self) -> None:
        """Load the run's step journal (one statement; none when it has recorded no step)."""
        await self._steps.load()

    @overload
    def step(
        self, name: str, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any
    ) -> Awaitable[T]: ...

    @overload
    def step(
        self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> Awaitable[T]: ...

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """A durable step (`workflows.steps`): `fn(*args, **kwargs)` run once per run, its
        result recorded; the occurrence is taken here, at the call."""
        return self._steps.call(name, fn, args, kwargs)

    async def emit(self, type: str, data: Mapping[str, Any]) -> int:
        if not type or len(type) > 64:
            raise ValueError("an event type is 1 to 64 characters")
        buffered = buffered_events(self._steps)
        if buffered is not None:  # inside a step: written with it, once
            json.dumps(dict(data))  # not JSON: the agent's bug, raised where it was made
            buffered.append({"type": type, "data": dict(data)})
            return 0
        async with self._sessions.unit(self.tenant_id, single_statement=True) as uow:
            appended = await append_event(
                uow, self.run_id, type, data, attempt=self.attempt, lease_s=self._lease_s
            )
        if appended is None:
            raise RunSuperseded(f"attempt {self.attempt} of run {self.run_id} no longer holds it")
        self._fresh = appended
        return appended.event_seq

    async def checkpoint(self) -> None:
        run, self._fresh = self._fresh, None
        if run is None:
            run = await self._read()
        if run is None or run.status != RunStatus.RUNNING or run.attempt != self.attempt:
            raise RunSuperseded(f"attempt {self.attempt} of run {self.run_id} no longer holds it")
        if run.cancel_requested_at is not None:
            raise RunCancelled()

    async def sleep(self, seconds: float) -> None:
        """A durable sleep: up to `DURABLE_SLEEP_MIN_S`, in-process (`delay`); longer, the run
        parks WAITING until then and this attempt ends (`RunParked`); a resumed attempt gets
        past it at once."""
        occurrence = self._next(waits.SLEEP, "")
        if seconds <= DURABLE_SLEEP_MIN_S:
            await self.delay(seconds)
            return
        await self._wait(waits.SLEEP, "", occurrence, seconds=seconds)

    async def sleep_until(self, when: datetime) -> None:
        """`sleep` until `when` (an aware datetime)."""
        if when.tzinfo is None:
            raise ValueError("sleep_until needs an aware datetime")
        occurrence = self._next(waits.SLEEP, "")
        seconds = (when - datetime.now(UTC)).total_seconds()
        if seconds <= DURABLE_SLEEP_MIN_S:
            await self.delay(seconds)
            return
        await self._wait(waits.SLEEP, "", occurrence, until=when)

    async def wait_for(
        self,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109 (durable, kept in PostgreSQL)
        *,
        default: Any = None,
    ) -> Any:
        """The payload of the next signal `name` (kept in the run's mailbox if it came first),
        or `default` once `timeout` seconds passed (None: no timeout). Parks the run WAITING
        when no such signal is there yet."""
        waits.check_name(name)
        if timeout is not None and timeout <= 0:
            raise ValueError("a wait's timeout is positive (or None: no timeout)")
        occurrence = self._next(waits.SIGNAL, name)
        resolved = await self._wait(waits.SIGNAL, name, occurrence, seconds=timeout)
        return default if resolved.by == "timeout" else resolved.payload

    def _next(self, kind: str, name: str) -> int:
        self._occurrences[kind, name] += 1
        return self._occurrences[kind, name]

    async def _wait(
        self,
        kind: str,
        name: str,
        occurrence: int,
        *,
        seconds: float | None = None,
        until: datetime | None = None,
    ) -> waits.Resolved:
        if buffered_events(self._steps) is not None:
            raise RuntimeError(
                f"a durable {kind} ({name or 'sleep'!r}) inside a step: sleeps over"
                f" {DURABLE_SLEEP_MIN_S:g} s and waits go between steps"
            )
        async with self._sessions.unit(self.tenant_id) as uow:
            outcome = await waits.wait(
                uow,
                run_id=self.run_id,
                attempt=self.attempt,
                kind=kind,
                name=name,
                occurrence=occurrence,
                seconds=seconds,
                until=until,
            )
        self._fresh = None
        if isinstance(outcome, waits.Parked):
            raise RunParked(f"run {self.run_id} waits ({kind} {name!r} #{occurrence})")
        return outcome

    async def delay(self, seconds: float) -> None:
        """Sleep in-process, holding the worker, looking at the run every second: a cancel
        request ends a long delay early (raising `RunCancelled`) instead of after it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(left, CANCEL_POLL_S))
            if left > CANCEL_POLL_S:
                self._fresh = None
                await self.checkpoint()

    async def _read(self) -> RunRecord | None:
        return await read_run(self._sessions, self.tenant_id, self.run_id)


async def run_attempt(deps: WorkflowDeps, run_id: RunId, control: AttemptControl) -> None:
    try:
        await _attempt(deps, run_id, control)
    except ServiceUnavailable as exc:  # the row cannot be read or written now: come back later
        log.warning("run %s: PostgreSQL cannot be reached; delivered again later", run_id)
        raise RetryLater(exc.retry_after, "PostgreSQL cannot be reached", counts=False) from exc


async def _attempt(deps: WorkflowDeps, run_id: RunId, control: AttemptControl) -> None:
    claiming = time.monotonic()  # the lease runs from no earlier than this
    async with deps.sessions.unit(single_statement=True) as uow:
        run = await claim_run(uow, run_id, lease_s=deps.lease_s)
    if run is None:
        await _not_claimed(deps, run_id)
        return
    if run.cancel_requested_at is not None:
        await _settle(deps, run, RunStatus.CANCELLED)
        return
    if run.lost_attempts >= MAX_LOST_ATTEMPTS:
        error = (
            f"gave up: its worker was lost {run.lost_attempts} times (the last one's lease "
            "expired); a run that kills its worker is not retried forever"
        )
        await _settle(deps, run, RunStatus.FAILED, error=error)
        return
    agent = deps.agents.get(run.agent)
    if agent is None:
        await _settle(deps, run, RunStatus.FAILED, error=f"agent {run.agent!r} is not installed")
        return
    await _execute(deps, run, agent, control, since=claiming)


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
    lease = _Lease(deps, run, control, since=since)
    try:
        async with lease.kept():
            async with asyncio.timeout(deps.settings.run_timeout_s):
                context = AttemptContext(deps, run)
                await context.resume()
                output = await agent.run(context, agent.parse(run.input))
        json.dumps(output)  # a result that is not JSON is the agent's bug, not a retry's
    except RunCancelled:
        await _settle(deps, run, RunStatus.CANCELLED)
    except RunParked as parked:
        log.info("%s; attempt %s ends, its worker slot is free", parked, run.attempt)
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


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


class _Lease:
    """Keeps an executing attempt's lease alive while the agent runs: in PostgreSQL (the truth: a
    live lease is what stops a second delivery from claiming the run) and in the engine (so that
    its sweep does not re-deliver a live attempt). A heartbeat that finds the run no longer held
    by this attempt cancels the agent (`lost`): someone else owns the run now. When heartbeats
    fail (PostgreSQL unreachable), the agent is cancelled (`expiring`) as soon as the next one
    could not be known to land before the lease could expire, counted on the monotonic clock
    from the start of the last heartbeat that succeeded (`since`): the server set the lease then
    or later, so the attempt stops before anyone else may claim the run, whatever the clocks say.
    The heartbeats stop before the attempt settles, so they never race its own terminal write."""

    def __init__(
        self, deps: WorkflowDeps, run: RunRecord, control: AttemptControl, *, since: float
    ) -> None:
        self._deps, self._run, self._control = deps, run, control
        self.since = since  # monotonic: the start of the last heartbeat (or claim) that succeeded
        self.lost = False
        self.expiring = False

    @asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        beating = asyncio.create_task(self._keep(asyncio.current_task()))
        try:
            yield
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)

    async def _keep(self, attempt: asyncio.Task[Any] | None) -> None:
        every_s = self._deps.lease_s / HEARTBEATS_PER_LEASE
        timeout_s = every_s * BEAT_TIMEOUT_SHARE
        while not self.lost:
            await asyncio.sleep(every_s)
            # A hung heartbeat is left behind, not awaited: the clock below decides.
            beat = asyncio.ensure_future(self._beat())
            await asyncio.wait({beat}, timeout=timeout_s)
            if not beat.done():
                beat.add_done_callback(_consume)
                log.warning("run %s: heartbeat took over %.1fs", self._run.id, timeout_s)
            elif beat.exception() is not None:
                log.warning("run %s: heartbeat failed: %r", self._run.id, beat.exception())
            if self.lost:
                break
            if time.monotonic() + every_s + timeout_s >= self.since + self._deps.lease_s:
                self.expiring = True
                log.warning(
                    "run %s: attempt %s could not heartbeat for %.1fs; it stops before its lease"
                    " could expire",
                    self._run.id,
                    self._run.attempt,
                    time.monotonic() - self.since,
                )
                break
        if attempt is not None:
            attempt.cancel()

    async def _beat(self) -> None:
        started = time.monotonic()
        async with self._deps.sessions.unit(single_statement=True) as uow:
            beat = await heartbeat(
                uow, self._run.id, attempt=self._run.attempt, lease_s=self._deps.lease_s
            )
        if beat is None:
            self.lost = True
            return
        self.since = max(self.since, started)
        # The engine's heartbeat only keeps its sweep away; a Redis that hangs must not stall
        # the loop that keeps the lease (the truth) alive.
        async with asyncio.timeout(self._deps.lease_s / HEARTBEATS_PER_LEASE):
            await self._control.heartbeat()


def _consume(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("a late heartbeat failed: %r", task.exception())


async def _settle(
    deps: WorkflowDeps,
    run: RunRecord,
    status: RunStatus,
    *,
    output: Any = None,
    error: str | None = None,
) -> None:
    """The terminal write, fenced on this attempt. PostgreSQL unreachable: tried again for up to
    a lease (a late write is still fenced), then `ServiceUnavailable` (delivered again later)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deps.lease_s
    while True:
        try:
            async with deps.sessions.unit(run.tenant_id, single_statement=True) as uow:
                settled = await settle_run(
                    uow, run.id, status, output=output, error=error, attempt=run.attempt
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
    async with deps.sessions.unit(run.tenant_id) as uow:
        requeued = await requeue_run(
            uow, run, event="retrying", data={"delayS": delay, "error": error}
        )
    if requeued is not None:
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
