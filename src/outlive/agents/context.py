"""What an executing agent sees of its run: `RunContext` (the `ctx` its `run` gets), the
output streams it writes and the model-call marks it takes. Protocols only: the worker's
`outlive.workflows.context` is the implementation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from datetime import datetime

    import httpx

    from outlive.agents.policy import Expected, Retry
    from outlive.config import Settings
    from outlive.ids import RunId, TenantId

T = TypeVar("T")


class OutputStream(Protocol):
    """What `ctx.stream(name)` gives: display text, written as it is made. `kind` says what the
    text is (`OutputChunk.kind`: "text", or "tool_call", "tool_result", "output"); `restart()`
    tells readers to drop what the stream showed so far (a call that failed and is made again:
    a `reset` chunk before the next text)."""

    def write(self, text: str, *, kind: str = "text") -> None: ...

    def restart(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> OutputStream: ...

    async def __aexit__(self, *exc: object) -> None: ...


class ModelCallMark(Protocol):
    """A model call marked as made (`ctx.model_call`)."""

    async def refused(self) -> None: ...

    async def cut(self, reason: str, *, input_tokens: int = 0, output_tokens: int = 0) -> None: ...


class RunSchedules(Protocol):
    """`ctx.schedules`: the run's tenant's schedules, made from inside a run."""

    async def create(
        self,
        *,
        cron: str,
        input: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        agent: str | None = None,
        key: str | None = None,
        on_conflict: Any = "REJECT",
        tags: Sequence[str] = (),
        jitter_seconds: int = 0,
        catchup_window_seconds: int = 300,
        name: str = "schedule",
    ) -> str:
        """Make a schedule (of this run's agent unless `agent=`), as `createSchedule` does, as
        a durable step named `schedules.create:<name>`: created once, whatever the crashes.
        Its id."""


class RunContext(Protocol):
    """What an executing agent sees of its run."""

    run_id: RunId
    tenant_id: TenantId
    attempt: int
    http: httpx.AsyncClient
    settings: Settings
    schedules: RunSchedules

    @property
    def public_http(self) -> httpx.AsyncClient:
        """An HTTP client that reaches public addresses only (the webhooks' destination guard:
        loopback, private, link-local and IPv4-embedding addresses refused with
        `UnsafeDestination`, each request pinned to the address checked). Use it for any URL
        that comes from a tenant; `http` is unguarded, for the operator's own endpoints."""

    async def emit(self, type: str, data: Mapping[str, Any]) -> int:
        """Append a timeline event now (durable before it returns); returns its `seq`. Inside a
        step's `fn`: buffered and written with the step (once), and 0 is returned."""

    async def patched(self, name: str) -> bool:
        """A change of the agent's code, marked: true for a run that reaches this point on code
        that knows the patch `name`, false for a run that went past it on older code and
        resumes on this one (recorded in the journal, so its answer never changes for a run):
        `if await ctx.patched("rename-fetch"): ... new code ... else: ... old code ...`. Between
        steps, not inside one. See docs/versions.md for when a change needs one."""

    async def checkpoint(self) -> None:
        """Between turns: raise `RunCancelled` if a cancel was requested, else return."""

    async def sleep(self, seconds: float) -> None:
        """A durable sleep. Up to 1 s it sleeps in-process; longer, the run parks WAITING (no
        worker held) and this attempt ends (`RunParked`, which the agent must let through);
        the run resumes from the top once it is due, and this call then returns at once."""

    async def sleep_until(self, when: datetime) -> None:
        """A durable sleep until `when` (an aware datetime); see `sleep`."""

    async def wait_for(
        self,
        name: str,
        timeout: float | None = None,  # noqa: ASYNC109 (durable, kept in PostgreSQL)
        *,
        default: Any = None,
        wait_id: str | None = None,
        show: Any = None,
    ) -> Any:
        """The payload of the next signal `name` (`signalRun`), or `default` after `timeout`
        seconds (None: none). A signal sent earlier is kept and returned at once; otherwise
        the run parks WAITING, like `sleep`, and resumes when it comes (or times out).
        `wait_id` (1 to 200 characters, unique in the run) names the wait: only a signal bound
        to it (`signalRun(waitId:)`) answers it, never one kept in the mailbox, and a plain one
        is refused while it waits. `show` (JSON) is what `Run.waitingShow` shows meanwhile."""

    async def delay(self, seconds: float) -> None:
        """Sleep in-process, holding the worker, looking at the run every second: a cancel
        request ends a long delay early (raising `RunCancelled`) instead of after it."""

    def stream(self, name: str) -> OutputStream:
        """A writer of the run's output stream `name` (display only, never journaled: read
        with the `runOutput` subscription). `write(text)` never blocks (batched to Redis about
        every 50 ms); the stream ends (a chunk with `done`) on `await close()`, on leaving
        `async with`, or when the step it was opened in ends."""

    async def spawn(
        self,
        agent: str,
        input: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        key: str | None = None,
        abandon: bool = False,
    ) -> Any:
        """Start a child run of `agent` now; `await handle.result(timeout=…)` parks until it
        settles. Identified by (this run, `name` or the agent's name, occurrence): a later
        attempt gets the same child back, never a second one. `abandon`: left running when
        this run settles or is cancelled (by default it is cancelled with it)."""

    async def call(
        self,
        agent: str,
        input: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        key: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (durable)
    ) -> Any:
        """`spawn` and await the child's output: the run parks WAITING (`waitingFor:
        "children"`, no worker, no slot) until it settles; `ChildFailed` when it failed."""

    async def map(
        self,
        agent: str,
        inputs: Sequence[Mapping[str, Any] | None],
        *,
        max_parallel: int = 10,
        return_exceptions: bool = False,
        name: str | None = None,
    ) -> list[Any]:
        """A child run per input, at most `max_parallel` live at once, their outputs in input
        order (`ChildFailed` for a failed one, raised unless `return_exceptions`)."""

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
        """A durable step: `await ctx.step(name, fn, *args, **kwargs)` calls `fn` (sync or async)
        and records its JSON result, keyed by (`name`, occurrence: the how-many-th call of that
        name in this attempt, counted at the call). A later attempt of the run gets the recorded
        value back without calling `fn`. The value is recorded and returned through `fn`'s
        return annotation (a pydantic model comes back as that model; no annotation: plain JSON
        values), the same on the first attempt as on later ones. At most 16 MiB of JSON
        (`StepTooLarge`: the run fails); over 256 KiB it is stored once, apart (`blobs`). `emit`
        inside `fn` is written with the step, once. An exception in `fn` records nothing and is
        handled as anywhere else in the run.

        The step's policy, keyword-only and never passed to `fn` (to give `fn` a keyword of one
        of these names, bind it with `functools.partial`): `retry=Retry(attempts, backoff,
        max_backoff)` calls `fn` again inside the attempt after a failure a retry can fix
        (`outlive.agents.policy`); `timeout` bounds each call (seconds; a `TimeoutError`, which
        a retry can fix); `shield=True` lets `fn` finish (and be recorded) when a cancel is
        requested meanwhile, instead of interrupting it; `limit="llm"` takes one request of that
        named limit (shared across workers, per tenant and global) before each call.
        `reserve=Expected(input_tokens, output_tokens, model)` (or a number of tokens) is the
        usage the step may record, reserved before it starts: of the named limit's token rates
        (None: `OUTLIVE_LLM_MAX_OUTPUT_TOKENS`) and of every budget that applies to the run;
        the step's commit settles it to what it recorded. `drain=True` lets the step, in flight
        when its worker is stopped (SIGTERM, a deploy), finish and be recorded within
        `OUTLIVE_SHUTDOWN_STEP_GRACE_S` before the run is handed back (a model call is not
        bought twice)."""

    async def model_call(self, model: str | None = None) -> ModelCallMark:
        """Inside a step's `fn`, before a model call: marks it as made (billed once the
        endpoint answers) until the step is recorded. A call the endpoint refused is
        `refused()`, one cut in the process `cut(reason)`; a mark the run never settles counts
        in `RunUsage.abandonedRequests`."""

    def record_usage(
        self, *, input_tokens: int, output_tokens: int, model: str | None = None
    ) -> None:
        """Inside a step's `fn`: count one model call's usage (tokens, and its cost when
        `model` is in the price table); recorded with the step, so counted once. Outside a
        step: `RuntimeError`. A step's result carrying `usage` is counted the same way."""
