"""Durable steps: one attempt's side of the run's step journal (`ctx.step`).

`StepJournal` numbers the calls of each step name in program order (the occurrence, taken at
the call, before anything is awaited, so loops and `asyncio.gather` are safe), answers a step
the journal already holds from memory (the whole journal is loaded in one statement when the
attempt starts; a memo hit costs no I/O), and otherwise runs `fn` and records its result, with
the events `fn` emitted, in one statement fenced on the attempt (`services.runs.record_step`).

How a value is recorded and given back is decided by `fn`'s return annotation, through a pydantic
`TypeAdapter`: a model comes back as that model, no annotation as plain JSON values. The first
attempt gets the value back decoded from what was recorded, exactly as a later attempt would.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import TypeAdapter, ValidationError

from outlive.agents.policy import status_of
from outlive.db.tx import Sessions
from outlive.errors import (
    JournalTooLarge,
    LimitWait,
    RunCancelled,
    RunParked,
    RunSuperseded,
)
from outlive.services import blobs, sealing
from outlive.services.runs import (
    MAX_JOURNAL_BYTES,
    MAX_STEP_NAME,
    Journal,
    RunRecord,
    append_event,
    journal_too_large,
    load_journal,
    record_step,
)
from outlive.services.runs.holds import gate_step, hold_version
from outlive.services.usage_tokens import StepUsage, price, usage_in
from outlive.telemetry import genai, metrics
from outlive.workflows.calls import Interrupts, Limits, StepPolicy, call
from outlive.workflows.drains import Drains
from outlive.workflows.step_values import encode as _encode
from outlive.workflows.step_values import result_adapter
from outlive.workflows.versions import PATCH_PREFIX, Cursor, VersionDiverged, invalid, patch_step

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_PARKS = (RunParked, LimitWait)  # a step that parks the run ends its span without an error


@dataclass(eq=False)
class _Frame:
    """The durable step the current task is executing: `emit` buffers its events here, and
    `record_usage` its usage, to be written with the step's journal row (once, whatever the
    attempt)."""

    journal: StepJournal
    name: str = ""
    occurrence: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    usage: StepUsage | None = None
    called: bool = False  # it made model calls (`run_calls`), settled by its record

    def reset(self) -> None:
        """A failed call of the step's function: what it buffered is dropped."""
        self.events.clear()
        self.usage = None


_IN_STEP: ContextVar[_Frame | None] = ContextVar("outlive_in_step", default=None)


def current_step(journal: StepJournal, what: str) -> _Frame:
    """The step of `journal` the current task executes; `RuntimeError` outside one."""
    frame = _IN_STEP.get()
    if frame is None or frame.journal is not journal:
        raise RuntimeError(f"{what} is called inside a step (ctx.step)")
    return frame


def buffered_events(journal: StepJournal) -> list[dict[str, Any]] | None:
    """Inside one of `journal`'s steps: the list its events go to; None otherwise."""
    frame = _IN_STEP.get()
    return frame.events if frame is not None and frame.journal is journal else None


def add_usage(journal: StepJournal, usage: StepUsage) -> None:
    """Count `usage` in the step being executed (`ctx.record_usage`); outside one of
    `journal`'s steps, a `RuntimeError` (usage is recorded with a step, so it is counted once)."""
    frame = _IN_STEP.get()
    if frame is None or frame.journal is not journal:
        raise RuntimeError("record_usage is called inside a step (ctx.step), where it is kept")
    frame.usage = usage if frame.usage is None else frame.usage + usage


class StepJournal:
    """One attempt's steps. `recorded(run)` is told the run as each step's commit left it.
    `code_version`: the agent's code version, recorded with each step; a journal recorded by
    another version is checked as the attempt replays it (`workflows.versions`)."""

    def __init__(
        self,
        sessions: Sessions,
        run: RunRecord,
        *,
        lease_s: float,
        recorded: Callable[[RunRecord], None],
        interrupts: Interrupts | None = None,
        limits: Limits | None = None,
        max_bytes: int = MAX_JOURNAL_BYTES,
        drains: Drains | None = None,
        code_version: str | None = None,
        blob_threshold: int = blobs.THRESHOLD,
        kek: AESGCM | None = None,
    ) -> None:
        self._sessions = sessions
        self._kek = kek  # the deployment key: results of a tenant that encrypts are sealed
        self.sealer = sealing.Sealer()  # its data cipher, once loaded: the attempt's values too
        self.code_version = code_version
        self._blob_threshold = blob_threshold
        self._cursor = Cursor({})
        self._foreign = False  # some recorded step was recorded by another code version
        self._drains = drains
        self._max_bytes = max_bytes
        self._bytes = 0  # the journal's results, loaded and recorded by this attempt
        self.interrupts = interrupts or Interrupts()
        self._limits = limits
        self._run = run
        self._lease_s = lease_s
        self._recorded = recorded
        self._journal: Journal = {}
        self._occurrences: dict[str, int] = {}

    async def load(self) -> None:
        """The run's journal, in one statement (none when the run has recorded no step), and
        the tenant's data key when it encrypts (one more, only with a deployment key)."""
        cipher = await sealing.cipher_of(self._sessions, self._kek, self._run.tenant_id)
        self.sealer.cipher = cipher
        if self._run.step_seq:
            versions: set[str | None] = set()
            self._journal, self._bytes = await load_journal(
                self._sessions, self._run.id, max_bytes=self._max_bytes, versions=versions
            )
            self._cursor = Cursor.of(self._journal)
            self._foreign = any(v != self.code_version for v in versions)

    def take(self, name: str, *, patch: bool = False) -> int:
        """The step's occurrence, taken now, synchronously: at the call, not at the await (a
        gather's steps are numbered in the order they were called)."""
        if not isinstance(name, str) or not 0 < len(name) <= MAX_STEP_NAME:
            raise ValueError(f"a step name is 1 to {MAX_STEP_NAME} characters")
        if not patch and name.startswith(PATCH_PREFIX):
            raise ValueError(f"a step name does not start with {PATCH_PREFIX!r} (ctx.patched's)")
        if _IN_STEP.get() is not None:
            raise RuntimeError(f"step {name!r} was called inside another step; steps do not nest")
        occurrence = self._occurrences.get(name, 0) + 1
        self._occurrences[name] = occurrence
        self._cursor.take((name, occurrence))
        return occurrence

    async def patched(self, name: str, past: Callable[[], Awaitable[bool]]) -> bool:
        """`ctx.patched(name)`: the recorded answer, else true unless the run went past this
        point on older code (recorded steps this attempt has not reached remain, or `past()`:
        waits it has not reached); the answer is recorded (`workflows.versions`)."""
        step = patch_step(name)
        occurrence = self.take(step, patch=True)
        recorded = self._journal.get((step, occurrence))
        if recorded is not None:
            return bool(json.loads(recorded))
        answer = self._cursor.next_recorded() is None and not await past()
        result = json.dumps(answer)
        await self._commit(step, occurrence, result, _Frame(self, step, occurrence), None, None)
        self._journal[step, occurrence] = result
        return answer

    async def ended(self) -> None:
        """The agent returned: a journal of another version that still holds steps it never
        asked for holds the run (`RunParked`)."""
        if self._foreign and (diverged := self._cursor.ended()) is not None:
            await self._hold(diverged)

    async def _hold(self, diverged: VersionDiverged) -> NoReturn:
        """Hold the run WAITING for 'version', saying where and why; this attempt ends."""
        run = self._run
        async with self._sessions.unit(run.tenant_id, single_statement=True) as uow:
            held = await hold_version(
                uow, run, attempt=run.attempt, data=diverged.event(self.code_version)
            )
        if held is None:
            raise RunSuperseded(f"attempt {run.attempt} of run {run.id} no longer holds it")
        metrics.VERSION_HOLDS.labels(run.agent).inc()
        raise RunParked(f"run {run.id} is held: {diverged.verdict}")

    async def run(
        self,
        name: str,
        occurrence: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: StepPolicy | None,
    ) -> Any:
        adapter = result_adapter(fn, name)
        if not genai.is_enabled():  # one flag test: no span, no context manager
            return await self._memo_or_run(name, occurrence, fn, args, kwargs, policy, adapter)
        run = self._run
        conversation = genai.conversation_id(run.key, run.id)
        with genai.step(name, occurrence, conversation, expected=_PARKS):
            return await self._memo_or_run(name, occurrence, fn, args, kwargs, policy, adapter)

    async def _memo_or_run(
        self,
        name: str,
        occurrence: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: StepPolicy | None,
        adapter: TypeAdapter[Any],
    ) -> Any:
        recorded = self._journal.get((name, occurrence))
        if recorded is not None:
            metrics.STEP_MEMO_HITS.labels(self._run.agent).inc()
            if blobs.is_ref_text(recorded):  # stored once, apart: read back when asked
                recorded = await blobs.read_text(self._sessions, self._run.tenant_id, recorded)
            recorded = sealing.open_text(self.sealer.cipher, recorded)
            genai.memoized()  # the step's span, when there is one
            try:
                return adapter.validate_json(recorded)
            except ValidationError as exc:
                if not self._foreign:
                    raise
                await self._hold(invalid(name, occurrence, exc))
        if self._foreign and (diverged := self._cursor.missed(name, occurrence)) is not None:
            await self._hold(diverged)
        return await self._admitted(name, occurrence, fn, args, kwargs, policy, adapter)

    async def _admitted(
        self,
        name: str,
        occurrence: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: StepPolicy | None,
        adapter: TypeAdapter[Any],
    ) -> Any:
        drains = self._drains
        if drains is None:
            return await self._execute(name, occurrence, fn, args, kwargs, policy, adapter)
        await drains.admit()  # a worker that stops starts no step
        if policy is None or not policy.drain:
            return await self._execute(name, occurrence, fn, args, kwargs, policy, adapter)
        with drains.step():  # a worker that stops lets it finish and be recorded
            return await self._execute(name, occurrence, fn, args, kwargs, policy, adapter)

    async def _execute(
        self,
        name: str,
        occurrence: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: StepPolicy | None,
        adapter: TypeAdapter[Any],
    ) -> Any:
        started = await self._gate(name, occurrence, policy)  # a pause, a budget, a cancel stop it
        frame = _Frame(self, name, occurrence)
        token = _IN_STEP.set(frame)
        try:
            value, reservation = await call(
                fn,
                args,
                kwargs,
                policy=policy,
                interrupts=self.interrupts,
                limits=self._limits,
                tenant_id=self._run.tenant_id,
                reset=frame.reset,
                retrying=partial(self._retrying, name, occurrence),
            )
        finally:
            _IN_STEP.reset(token)
        usage = frame.usage if frame.usage is not None else usage_in(value)
        if reservation is not None and self._limits is not None:  # what it reserved becomes
            spent = None if usage is None else usage.input_tokens + usage.output_tokens
            await self._limits.settle(reservation, spent)  # what it used (unknown: kept)
        result = _encode(adapter, value, name, occurrence)
        cipher = self.sealer.cipher
        journaled = result if cipher is None else sealing.seal(cipher, result)
        if len(journaled) > self._blob_threshold:  # characters: at most as many as its bytes
            run = self._run
            journaled = await blobs.store_text(self._sessions, run.tenant_id, run.id, journaled)
        await self._commit(name, occurrence, journaled, frame, usage, started)
        metrics.STEPS_RECORDED.labels(self._run.agent).inc()
        if usage is not None:  # on the step's span: what it bought, recorded
            cost = None if usage.cost_usd is None else float(usage.cost_usd)
            genai.usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                model=usage.model,
                cost_usd=cost,
            )
        return adapter.validate_json(result)  # what a later attempt would get back

    async def _retrying(
        self, name: str, occurrence: int, exc: Exception, failures: int, delay: float
    ) -> None:
        """A call of the step failed and is made again after `delay` (its policy's retry): a
        `retrying` event, written now (a model endpoint's 429s and 503s leave a trace: F10)."""
        data: dict[str, Any] = {
            "step": name,
            "occurrence": occurrence,
            "call": failures,
            "waitS": round(delay, 3),
            "error": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        }
        if (status := status_of(exc)) is not None:
            data["status"] = status
        run = self._run
        async with self._sessions.unit(run.tenant_id, single_statement=True) as uow:
            appended = await append_event(
                uow, run.id, "retrying", data, attempt=run.attempt, lease_s=self._lease_s
            )
        if appended is None:
            raise RunSuperseded(f"attempt {run.attempt} of run {run.id} no longer holds it")
        self._recorded(appended)

    async def _gate(self, name: str, occurrence: int, policy: StepPolicy | None) -> datetime:
        """Before the step starts, in one statement (`services.runs.holds.gate_step`): the
        attempt must still hold the run, with no cancel, pause or budget against it, and the
        step's expected usage is reserved against the run's budgets. A hold parks the run
        WAITING there (`RunParked`): no step starts after a pause or a hold committed."""
        run, expected = self._run, policy.reserve if policy is not None else None
        tokens, usd = 0, Decimal(0)
        if expected is not None:
            tokens = expected.tokens
            usd = price(expected.model, expected.input_tokens, expected.output_tokens) or usd
        async with self._sessions.unit(run.tenant_id, single_statement=True) as uow:
            gate = await gate_step(
                uow,
                run,
                attempt=run.attempt,
                name=name,
                occurrence=occurrence,
                tokens=tokens,
                usd=usd,
            )
        if gate.verdict == "go" and gate.started is not None:
            return gate.started  # when it started, by PostgreSQL's clock
        if gate.verdict == "gone":
            raise RunSuperseded(f"attempt {run.attempt} of run {run.id} no longer holds it")
        if gate.verdict == "cancel":
            raise RunCancelled()
        if gate.verdict == "over":
            raise RunCancelled(f"over budget {gate.budget_id}: its step {name!r} did not start")
        why = "a pause" if gate.verdict == "paused" else f"budget {gate.budget_id}"
        raise RunParked(f"run {run.id} is held by {why} before step {name!r}")

    async def _commit(
        self,
        name: str,
        occurrence: int,
        result: str,
        frame: _Frame,
        usage: StepUsage | None,
        started: datetime | None,
    ) -> None:
        run = self._run
        size = self._bytes + len(result.encode())
        if size > self._max_bytes:  # before it is written: every later attempt loads it all
            raise JournalTooLarge(journal_too_large(size, self._max_bytes))
        async with self._sessions.unit(run.tenant_id, single_statement=True) as uow:
            done = await record_step(
                uow,
                run.id,
                attempt=run.attempt,
                lease_s=self._lease_s,
                name=name,
                occurrence=occurrence,
                result=result,
                events=frame.events,
                usage=usage,
                started_at=started,
                called=frame.called,
                code_version=self.code_version,
            )
        if done is None:
            raise RunSuperseded(f"attempt {run.attempt} of run {run.id} no longer holds it")
        self._bytes = size
        self._recorded(done)
