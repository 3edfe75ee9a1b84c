"""The `RunContext` an agent receives for one attempt: steps, events, the cancel checkpoint,
durable sleeps and waits. Every write is fenced on the attempt."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar, overload

import httpx

from outlive.agents.policy import Expected, Retry
from outlive.db.models import RunStatus
from outlive.errors import LimitWait, RunCancelled, RunParked, RunSuperseded
from outlive.ids import RunId, TenantId
from outlive.services import waits
from outlive.services.destinations import GuardedTransport
from outlive.services.runs import RunRecord, append_event, calls, read_run
from outlive.services.sealing import Sealer
from outlive.services.usage_tokens import measured
from outlive.telemetry import genai
from outlive.workflows.billing import ModelCall
from outlive.workflows.calls import StepPolicy
from outlive.workflows.children import ChildHandle, Family
from outlive.workflows.deps import WorkflowDeps
from outlive.workflows.schedules import RunSchedules
from outlive.workflows.steps import StepJournal, add_usage, buffered_events, current_step
from outlive.workflows.streams import StreamWriter, within_step

# A sleep this short or shorter is slept in-process (parking and waking costs more than it
# saves, and holds the slot for at most this long); a longer one parks the run WAITING.
DURABLE_SLEEP_MIN_S = 1.0
MAX_PARALLEL = 1000  # live children of one map
FINE_S = 0.002  # the end of a sleep finished in-process: its last 2 ms pass turn by turn

T = TypeVar("T")


class AttemptContext:
    """The `RunContext` an agent receives; every write is fenced on this attempt."""

    def __init__(self, deps: WorkflowDeps, run: RunRecord) -> None:
        self.run_id: RunId = run.id
        self.tenant_id: TenantId = run.tenant_id
        self.attempt = run.attempt
        self.http = deps.http
        self.settings = deps.settings
        self._public_transport = deps.public_transport
        self._public_http: httpx.AsyncClient | None = None
        self._sessions = deps.sessions
        self._lease_s = deps.lease_s
        self._fresh: RunRecord | None = run  # the row as this attempt last wrote it
        self._steps = StepJournal(
            deps.sessions,
            run,
            lease_s=deps.lease_s,
            recorded=self._moved,
            limits=deps.limits,
            max_bytes=deps.settings.run_journal_max_bytes,
            drains=deps.drains,
            code_version=deps.agents.version_of(run.agent),
            blob_threshold=deps.settings.blob_threshold_bytes,
            kek=deps.kek,
        )
        self.interrupts = self._steps.interrupts
        self._occurrences: Counter[tuple[str, str]] = Counter()  # sleeps and waits, so far
        self._outputs = deps.outputs
        self._batch_s = deps.settings.stream_batch_ms / 1000
        self._family = Family(  # its child runs
            deps, run, run.attempt, self.interrupts.pause, sealer=self._steps.sealer
        )
        self._conversation = genai.conversation_id(run.key, run.id)  # its GenAI spans
        self._wake_lead = deps.wake_lead
        self._slots = deps.slots
        self.schedules = RunSchedules(
            deps,
            run_id=run.id,
            tenant_id=run.tenant_id,
            agent=run.agent,
            step=self.step,
            sealer=self._steps.sealer,
        )

    @property
    def public_http(self) -> httpx.AsyncClient:
        """A client that reaches public addresses only: the webhooks' destination guard
        (`services.destinations.GuardedTransport`) checks and pins every request, its lookups
        counted against this run's tenant. Made on first use, on the worker's shared pool."""
        if self._public_http is None:
            self._public_http = httpx.AsyncClient(
                transport=GuardedTransport(
                    self._public_transport,
                    tenant=self.tenant_id,
                    allow_private=self.settings.webhook_allow_private,
                ),
                timeout=self.settings.webhook_timeout_s,
            )
        return self._public_http

    def _moved(self, run: RunRecord) -> None:
        self._fresh = run

    @property
    def sealer(self) -> Sealer:
        """Seals and opens the run's values (`services.sealing`), once `resume` has loaded it."""
        return self._steps.sealer

    async def resume(self) -> None:
        """Load the run's step journal (one statement; none when it has recorded no step)."""
        await self._steps.load()

    async def ended(self) -> None:
        """The agent returned: a run whose journal, recorded by another code version, holds
        steps the code never asked for is held WAITING for 'version' (`workflows.versions`)."""
        await self._steps.ended()

    async def patched(self, name: str) -> bool:
        """True for a run that reaches this point on code that knows the patch `name`; false
        for one that went past it on older code. Recorded: it never changes for a run."""
        return await self._steps.patched(name, self._past_waits)

    async def _past_waits(self) -> bool:
        if self.attempt <= 1:  # no earlier attempt reached anything
            return False
        return await waits.reached_beyond(self._sessions, self.run_id, self._occurrences)

    @overload
    def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
        shield: bool = False,
        limit: str | None = None,
        reserve: Expected | int | None = None,
        drain: bool = False,
        **kwargs: Any,
    ) -> Awaitable[T]: ...

    @overload
    def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
        shield: bool = False,
        limit: str | None = None,
        reserve: Expected | int | None = None,
        drain: bool = False,
        **kwargs: Any,
    ) -> Awaitable[T]: ...

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
        shield: bool = False,
        limit: str | None = None,
        reserve: Expected | int | None = None,
        drain: bool = False,
        **kwargs: Any,
    ) -> Any:
        """A durable step (`workflows.steps`): `fn(*args, **kwargs)` run once per run, its
        result recorded; the occurrence is taken here, at the call. `retry`, `timeout`, `shield`,
        `limit`, `reserve` and `drain` are the step's policy (`workflows.calls`), never passed to
        `fn`. The streams `fn` opens end with it (`workflows.streams`). `drain`: a worker that
        stops (SIGTERM) lets this step, in flight, finish and be recorded within
        `OUTLIVE_SHUTDOWN_STEP_GRACE_S` before it hands the run back."""
        policy = None
        if isinstance(reserve, int):
            reserve = Expected(input_tokens=reserve)
        wanted = (retry, timeout, limit, reserve)
        if shield or drain or any(p is not None for p in wanted):
            policy = StepPolicy(
                retry=retry,
                timeout=timeout,
                shield=shield,
                limit=limit,
                reserve=reserve,
                drain=drain,
            )
        occurrence = self._steps.take(name)
        return self._stepping(partial(self._steps.run, name, occurrence, fn, args, kwargs, policy))

    async def _stepping(self, step: Callable[[], Awaitable[Any]]) -> Any:
        """The step's one coroutine, the rest built when it starts: a step cancelled before it
        started (a gather cancelled with its attempt) leaves no inner coroutine never awaited."""
        return await self._parking(within_step(step()))

    async def _parking(self, step: Awaitable[T]) -> T:
        """The step; a named limit too far away to wait for in-process (`LimitWait`) parks the
        run WAITING on a timer instead (the step's call was not made), and a resumed attempt
        runs the step again. The sleep is named for the attempt, so each attempt parks anew."""
        try:
            return await step
        except LimitWait as wait:
            name = f"limit:{wait.name}:{self.attempt}"
            occurrence = self._next(waits.SLEEP, name)
            await self._wait(waits.SLEEP, name, occurrence, seconds=max(wait.seconds, 1.0))
            raise RuntimeError("a limit's park returned without parking") from wait

    async def model_call(self, model: str | None = None) -> ModelCall:
        """Inside a step: a model call is about to be made (`workflows.billing`); its mark is
        settled by the step's record, or by `refused()` / `cut()` on the handle."""
        frame = current_step(self._steps, "model_call")
        seq = await calls.begin_call(
            self._sessions,
            self.tenant_id,
            self.run_id,
            attempt=self.attempt,
            step=frame.name,
            occurrence=frame.occurrence,
            model=model,
        )
        frame.called = True
        return ModelCall(self._sessions, self.tenant_id, seq)

    def record_usage(
        self, *, input_tokens: int, output_tokens: int, model: str | None = None
    ) -> None:
        """Count one model call's usage in the step being executed (recorded with it, once)."""
        add_usage(
            self._steps,
            measured(input_tokens=input_tokens, output_tokens=output_tokens, model=model),
        )

    def cancel_requested(self) -> None:
        """A cancel was requested of this run (pushed by the worker, or found by a heartbeat):
        the step being awaited is interrupted (`workflows.calls.Interrupts`)."""
        self.interrupts.request()

    # --- streams (`workflows.streams`): display only, never journaled -------------------------

    def stream(self, name: str) -> StreamWriter:
        """A writer of the run's stream `name`: `write(text)` is batched to Redis, `close()`
        (or leaving `async with`, or the end of the step it was opened in) ends it."""
        return StreamWriter(
            self._outputs, self.run_id, name, batch_s=self._batch_s, attempt=self.attempt
        )

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
        if run.cancel_requested_at is not None or self.interrupts.requested.is_set():
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
        wait_id: str | None = None,
        show: Any = None,
    ) -> Any:
        """The payload of the next signal `name` (kept in the run's mailbox if it came first),
        or `default` once `timeout` seconds passed (None: no timeout). Parks the run WAITING
        when no such signal is there yet. `wait_id`: a wait that named itself, answered only by
        a signal bound to it; `show`: what `Run.waitingShow` shows while it waits (JSON)."""
        waits.check_name(name)
        if timeout is not None and timeout <= 0:
            raise ValueError("a wait's timeout is positive (or None: no timeout)")
        if wait_id is not None:
            waits.check_wait_id(wait_id)
            json.dumps(show)  # not JSON: the agent's bug, raised where it was made
        occurrence = self._next(waits.SIGNAL, name)
        resolved = await self._wait(
            waits.SIGNAL, name, occurrence, seconds=timeout, wait_id=wait_id, show=show
        )
        return default if resolved.by == "timeout" else self.sealer.open(resolved.payload)

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
        wait_id: str | None = None,
        show: Any = None,
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
                wait_id=wait_id,
                show=show,
            )
        self._fresh = None
        if isinstance(outcome, waits.Parked):
            raise RunParked(f"run {self.run_id} waits ({kind} {name!r} #{occurrence})")
        if outcome.handed_s is not None:
            self._wake_lead.seen(outcome.handed_s)
        await self._finish(outcome.not_before)
        return outcome

    async def _finish(self, not_before: float) -> None:
        """A sleep handed back ahead of its due time (`OUTLIVE_WAKE_LEAD_S`) ends here, in-process,
        never before `not_before` (`waits.Resolved`); a cancel request ends it at once. The
        attempt's worker slot is lent meanwhile (`workflows.slots`)."""
        if (left := not_before - time.monotonic()) <= 0:
            return
        async with self._slots.lent(left):
            await self.interrupts.until(not_before, fine_s=FINE_S)

    async def delay(self, seconds: float) -> None:
        """Sleep in-process, holding the worker: a cancel request ends it at once (raising
        `RunCancelled`) instead of after it."""
        await self.interrupts.pause(seconds)

    async def spawn(
        self,
        agent: str,
        input: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        key: str | None = None,
        abandon: bool = False,
    ) -> ChildHandle:
        """Start a child run of `agent` now (`workflows.children`); await its result later."""
        family = self._family
        step = family.next_step(name or agent)
        with genai.child(agent, step, self._conversation):
            return await family.handle(family.spec(step, agent, input, key=key, abandon=abandon))

    async def call(
        self,
        agent: str,
        input: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        key: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (durable: from the child's start)
    ) -> Any:
        """Start a child run, park until it settles, return its output (`ChildFailed`)."""
        handle = await self.spawn(agent, input, name=name, key=key)
        return await handle.result(timeout=timeout)

    async def map(
        self,
        agent: str,
        inputs: Sequence[Mapping[str, Any] | None],
        *,
        max_parallel: int = 10,
        return_exceptions: bool = False,
        name: str | None = None,
    ) -> list[Any]:
        """A child run of `agent` per input, at most `max_parallel` live at once; their outputs
        in input order (a failed child raises `ChildFailed`, or stands in the list as one with
        `return_exceptions`)."""
        if not 1 <= max_parallel <= MAX_PARALLEL:
            raise ValueError(f"max_parallel is 1 to {MAX_PARALLEL}")
        family = self._family
        base = family.next_step(name or agent)
        specs = [family.spec(f"{base}[{i}]", agent, one) for i, one in enumerate(inputs)]
        with genai.child(agent, base, self._conversation, expected=(RunParked,)):
            return await family.gather(
                [s.step for s in specs],
                limit=max_parallel,
                pending=specs,
                fail_fast=not return_exceptions,
            )

    async def _read(self) -> RunRecord | None:
        return await read_run(self._sessions, self.tenant_id, self.run_id)
