"""The `RunContext` of `outlive replay`: today's code against one run's recorded journal,
in-process, writing nothing (`workflows.replay`).

Every recorded step answers from the journal, through the step function's return annotation as
a worker would (`workflows.step_values.result_adapter`); a step function never runs. A step the
journal does not have, or a sleep, wait or child the run has not got past, is where the replay
stops (`Stop`): a divergence when recorded steps remain (`workflows.versions`), else the
frontier the run would go on from. Waits answer from `run_waits`, children from their rows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from outlive.config import Settings
from outlive.errors import ChildFailed
from outlive.services.runs.recorded import Recorded
from outlive.workflows.step_values import result_adapter
from outlive.workflows.versions import (
    PATCH_PREFIX,
    Cursor,
    VersionDiverged,
    invalid,
    patch_step,
)

SLEEP, SIGNAL = "sleep", "signal"
IN_PROCESS_SLEEP_S = 1.0  # `workflows.context.DURABLE_SLEEP_MIN_S`: slept without a record


class Stop(BaseException):
    """The replay ends here: `diverged` says why, None at the run's frontier. Not an
    `Exception`: an agent's `except Exception` must not catch it."""

    def __init__(self, diverged: VersionDiverged | None, where: str) -> None:
        super().__init__(where)
        self.diverged = diverged
        self.where = where


class _Nowhere(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"outlive replay is offline: {request.url} refused")


class _NullStream:
    def write(self, text: str, *, kind: str = "text") -> None:
        return None

    def restart(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> _NullStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Handle:
    """A child started by `spawn`, answered from its row."""

    def __init__(self, context: ReplayContext, step: str) -> None:
        self._context = context
        self.step = step

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return self._context.child_output(self.step, fail=True)


class ReplayContext:
    """What the agent's `run` is given in a replay."""

    def __init__(self, recorded: Recorded, settings: Settings) -> None:
        run = recorded.run
        self.run_id = run.id
        self.tenant_id = run.tenant_id
        self.attempt = run.attempt + 1  # the attempt that would resume it
        self.settings = settings
        self.http = httpx.AsyncClient(transport=_Nowhere())
        self.public_http = self.http
        self.recorded = recorded
        self.cursor = Cursor.of(recorded.steps)
        self.answered = 0  # steps the journal answered
        self.old_branches: list[str] = []  # patches answered false: the run needs them
        self._occurrences: Counter[str] = Counter()
        self._waits: Counter[tuple[str, str]] = Counter()
        self._children: Counter[str] = Counter()

    def frontier(self, where: str) -> Stop:
        """The run got no further than this when recorded: the end of the replay."""
        return Stop(self.cursor.ended(), where)

    def _take(self, name: str) -> int:
        self._occurrences[name] += 1
        occurrence = self._occurrences[name]
        self.cursor.take((name, occurrence))
        return occurrence

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if name.startswith(PATCH_PREFIX):
            raise ValueError(f"a step name does not start with {PATCH_PREFIX!r}")
        occurrence = self._take(name)
        return self._step(name, occurrence, fn)

    async def _step(self, name: str, occurrence: int, fn: Callable[..., Any]) -> Any:
        recorded = self.recorded.steps.get((name, occurrence))
        if recorded is None:
            missed = self.cursor.missed(name, occurrence)
            raise Stop(missed, f"{name} #{occurrence}") if missed else self.frontier(name)
        try:
            value = result_adapter(fn, name).validate_json(recorded)
        except ValidationError as exc:
            raise Stop(invalid(name, occurrence, exc), name) from None
        self.answered += 1
        return value

    async def patched(self, name: str) -> bool:
        step = patch_step(name)
        occurrence = self._take(step)
        recorded = self.recorded.steps.get((step, occurrence))
        if recorded is not None:
            answer = bool(json.loads(recorded))
        else:
            answer = self.cursor.next_recorded() is None and not self._past_waits()
        if not answer:
            self.old_branches.append(name)
        return answer

    def _past_waits(self) -> bool:
        return any(
            occurrence > self._waits[kind, name]
            for kind, name, occurrence in self.recorded.waits
            if not (kind == SLEEP and name.startswith("limit:"))
        )

    async def _wait(self, kind: str, name: str) -> Any:
        self._waits[kind, name] += 1
        occurrence = self._waits[kind, name]
        wait = self.recorded.waits.get((kind, name, occurrence))
        if wait is None or not wait.resolved:
            raise self.frontier(f"{kind} {name!r} #{occurrence}")
        return wait

    async def sleep(self, seconds: float) -> None:
        if seconds <= IN_PROCESS_SLEEP_S:
            self._waits[SLEEP, ""] += 1
            return
        await self._wait(SLEEP, "")

    async def sleep_until(self, when: datetime) -> None:
        await self.sleep((when - datetime.now(UTC)).total_seconds())

    async def wait_for(
        self,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109
        *,
        default: Any = None,
        wait_id: str | None = None,
        show: Any = None,
    ) -> Any:
        wait = await self._wait(SIGNAL, name)
        return default if wait.by == "timeout" else wait.payload

    async def emit(self, type: str, data: Mapping[str, Any]) -> int:
        return 0

    async def checkpoint(self) -> None:
        return None

    async def delay(self, seconds: float) -> None:
        return None

    def stream(self, name: str) -> _NullStream:
        return _NullStream()

    async def model_call(self, model: str | None = None) -> Any:
        raise RuntimeError("model_call is called inside a step (ctx.step)")

    def record_usage(
        self, *, input_tokens: int, output_tokens: int, model: str | None = None
    ) -> None:
        raise RuntimeError("record_usage is called inside a step (ctx.step)")

    def _child_step(self, name: str) -> str:
        self._children[name] += 1
        return f"{name}#{self._children[name]}"

    def child_output(self, step: str, *, fail: bool) -> Any:
        child = self.recorded.children.get(step)
        if child is None or child.status not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            raise self.frontier(f"child {step}")
        if child.status != "SUCCEEDED":
            failed = ChildFailed(child.id, child.status, child.error)
            if fail:
                raise failed
            return failed
        return child.output

    async def spawn(
        self, agent: str, input: Any = None, *, name: str | None = None, **_: Any
    ) -> Any:
        return _Handle(self, self._child_step(name or agent))

    async def call(
        self, agent: str, input: Any = None, *, name: str | None = None, **_: Any
    ) -> Any:
        return self.child_output(self._child_step(name or agent), fail=True)

    async def map(
        self,
        agent: str,
        inputs: Sequence[Any],
        *,
        return_exceptions: bool = False,
        name: str | None = None,
        **_: Any,
    ) -> list[Any]:
        base = self._child_step(name or agent)
        return [
            self.child_output(f"{base}[{i}]", fail=not return_exceptions)
            for i in range(len(inputs))
        ]
