"""The agent registry.

An agent is a name, a description, a pydantic input model (its JSON Schema is what the `agents`
query returns and what `startRun` validates against before anything is written) and an async
function `run(ctx, params) -> output`. The function talks to the world only through `ctx`:
`await ctx.emit(type, data)` appends a durable timeline event, `await ctx.checkpoint()` (between
turns) stops the run when a cancel was requested, `await ctx.delay(s)` waits in-process without
blocking a cancel, `await ctx.sleep(s)` / `ctx.sleep_until(t)` and `await ctx.wait_for(name,
timeout=...)` park the run WAITING (durable: no worker held; see `outlive.services.waits`),
`await ctx.step(name, fn, *args, **kwargs)` runs `fn` as a durable step (its result recorded; a
later attempt of the run gets it back without calling `fn` again: see the README, "Writing a
durable agent"), and `raise RetryableFault(...)` asks for another attempt. Any other exception
settles the run FAILED at once.

Agents are found through the entry-point group `outlive.agents`; the built-in `demo` and `llm`
are registered the same way in our own pyproject.toml. A third-party package adds one with:

    [project.entry-points."outlive.agents"]
    summarize = "acme_agents.summarize:AGENT"
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from outlive.db.models import RunConflict
from outlive.errors import BadUserInput

if TYPE_CHECKING:
    from datetime import datetime

    from outlive.agents.policy import Retry
    from outlive.config import Settings
    from outlive.ids import RunId, TenantId

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "outlive.agents"
MAX_INPUT_BYTES = 64 * 1024

P = TypeVar("P", bound=BaseModel)
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


class RunContext(Protocol):
    """What an executing agent sees of its run."""

    run_id: RunId
    tenant_id: TenantId
    attempt: int
    http: httpx.AsyncClient
    settings: Settings

    @property
    def public_http(self) -> httpx.AsyncClient:
        """An HTTP client that reaches public addresses only (the webhooks' destination guard:
        loopback, private, link-local and IPv4-embedding addresses refused with
        `UnsafeDestination`, each request pinned to the address checked). Use it for any URL
        that comes from a tenant; `http` is unguarded, for the operator's own endpoints."""

    async def emit(self, type: str, data: Mapping[str, Any]) -> int:
        """Append a timeline event now (durable before it returns); returns its `seq`. Inside a
        step's `fn`: buffered and written with the step (once), and 0 is returned."""

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
        drain: bool = False,
        **kwargs: Any,
    ) -> Any:
        """A durable step: `await ctx.step(name, fn, *args, **kwargs)` calls `fn` (sync or async)
        and records its JSON result, keyed by (`name`, occurrence: the how-many-th call of that
        name in this attempt, counted at the call). A later attempt of the run gets the recorded
        value back without calling `fn`. The value is recorded and returned through `fn`'s
        return annotation (a pydantic model comes back as that model; no annotation: plain JSON
        values), the same on the first attempt as on later ones. At most 256 KiB of JSON
        (`StepTooLarge`: the run fails). `emit` inside `fn` is written with the step, once. An
        exception in `fn` records nothing and is handled as anywhere else in the run.

        The step's policy, keyword-only and never passed to `fn` (to give `fn` a keyword of one
        of these names, bind it with `functools.partial`): `retry=Retry(attempts, backoff,
        max_backoff)` calls `fn` again inside the attempt after a failure a retry can fix
        (`outlive.agents.policy`); `timeout` bounds each call (seconds; a `TimeoutError`, which
        a retry can fix); `shield=True` lets `fn` finish (and be recorded) when a cancel is
        requested meanwhile, instead of interrupting it; `limit="llm"` takes one request of that
        named limit (shared across workers, per tenant and global) before each call; `drain=True`
        lets the step, in flight when its worker is stopped (SIGTERM, a deploy), finish and be
        recorded within `OUTLIVE_SHUTDOWN_STEP_GRACE_S` before the run is handed back (a model
        call is not bought twice)."""

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


@dataclass(frozen=True)
class Signal:
    """A signal an agent waits for: its payload's type (validated at `signalRun`: a payload that
    does not fit is refused, nothing kept) and whether it must be bound to the wait it answers
    (`waitId`: a plain one is refused)."""

    payload: Any = Any
    bound: bool = False
    adapter: TypeAdapter[Any] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "adapter", TypeAdapter(self.payload))

    def schema(self) -> dict[str, Any]:
        return {"payload": self.adapter.json_schema(by_alias=True), "bound": self.bound}


@dataclass(frozen=True)
class Agent(Generic[P]):
    name: str
    description: str
    input_model: type[P]
    run: Callable[[RunContext, P], Awaitable[Any]]
    # Keys (contract §4.1): the key of a run started without one, from its input (None: the
    # default key ""), and what a start does when that key has an active run (None:
    # RETURN_EXISTING). `Agent(..., key=lambda p: f"conversation:{p.conversation_id}",
    # on_conflict=RunConflict.ENQUEUE)` gives each conversation its own line.
    key: Callable[[P], str] | None = field(default=None, compare=False)
    on_conflict: RunConflict | None = None
    # The signals it waits for, by name (None: any name, any payload, bound or not). A run of
    # an agent that declares them takes no other name, and no payload that does not fit.
    signals: Mapping[str, Signal] | None = field(default=None, compare=False)
    # More than the input model can say of an input (a model chosen from an allow-list): raises
    # `BadUserInput` at `startRun`, before anything is written.
    check: Callable[[P], None] | None = field(default=None, compare=False)
    input_schema: dict[str, Any] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_schema", self.input_model.model_json_schema(by_alias=True))

    def validate(self, raw: Mapping[str, Any] | None) -> dict[str, Any]:
        """The input as stored on the row, or `BadUserInput` saying what is wrong."""
        if raw is not None and not isinstance(raw, Mapping):
            raise BadUserInput(f"input for agent {self.name!r} must be a JSON object")
        if len(json.dumps(raw or {})) > MAX_INPUT_BYTES:
            raise BadUserInput(f"input for agent {self.name!r} is over {MAX_INPUT_BYTES} bytes")
        try:
            params = self.input_model.model_validate(raw or {})
        except ValidationError as exc:
            raise BadUserInput(f"invalid input for agent {self.name!r}: {_summary(exc)}") from None
        if self.check is not None:
            self.check(params)
        return params.model_dump(mode="json", by_alias=True, exclude_none=True)

    def check_signal(self, name: str, payload: Any, wait_id: str | None) -> None:
        """`BadUserInput` for a signal this agent's runs do not take: a name it does not wait for,
        a payload that does not fit, or a plain signal where it takes bound ones only."""
        if self.signals is None:
            return
        signal = self.signals.get(name)
        if signal is None:
            known = ", ".join(sorted(self.signals)) or "none"
            raise BadUserInput(
                f"agent {self.name!r} waits for no signal {name!r} (it takes: {known})"
            )
        if signal.bound and wait_id is None:
            raise BadUserInput(
                f"the signal {name!r} answers one wait of agent {self.name!r}: pass its waitId"
                " (Run.waitId while the run waits)"
            )
        try:
            signal.adapter.validate_python(payload)
        except ValidationError as exc:
            raise BadUserInput(
                f"invalid payload for the signal {name!r}: {_summary(exc)}"
            ) from None

    def parse(self, stored: Mapping[str, Any]) -> P:
        return self.input_model.model_validate(stored)

    def default_key(self, params: Mapping[str, Any]) -> str:
        """The key of a run started with `params` (validated) and no key: "" unless the agent
        declares a `key`, which must give 0..200 characters ("" is the default key)."""
        if self.key is None:
            return ""
        key = self.key(self.parse(params))
        if not isinstance(key, str) or len(key) > 200:
            raise BadUserInput(f"agent {self.name!r} derived a key that is not 0..200 characters")
        return key


def _load(path: str) -> list[Agent[Any]]:
    module_name, _, attribute = path.partition(":")
    loaded = getattr(import_module(module_name), attribute or "AGENT")
    agents = list(loaded) if isinstance(loaded, list | tuple) else [loaded]
    if not all(isinstance(a, Agent) for a in agents):
        raise TypeError(f"{path} is not an outlive Agent or a list of them")
    return agents


def _failed(where: str, exc: BaseException) -> str:
    """An agent module that failed to load: logged with its traceback, and the error it gives."""
    log.error("agent code %s failed to load; its agents are unavailable", where, exc_info=exc)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__


def _summary(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "input"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


class AgentRegistry:
    """The agents a process serves. `unavailable`: agents whose code failed to load, by name,
    with the error (an entry point's name, or `name=` in `OUTLIVE_AGENT_MODULES`): listed
    unavailable by `agents`, refused by `startRun`, and their runs wait (a worker leaves them
    QUEUED) while every other agent runs (round five, F11)."""

    def __init__(
        self, agents: Iterable[Agent[Any]], unavailable: Mapping[str, str] | None = None
    ) -> None:
        self._agents: dict[str, Agent[Any]] = {}
        for agent in agents:
            if agent.name in self._agents:
                raise ValueError(f"two agents are named {agent.name!r}")
            self._agents[agent.name] = agent
        self.unavailable = {
            name: error for name, error in (unavailable or {}).items() if name not in self._agents
        }

    @classmethod
    def from_entry_points(cls, modules: Iterable[str] = ()) -> AgentRegistry:
        """The installed agents (entry points), and those named by `modules` ("module:attribute",
        an Agent or a list of Agents, or "name=module:attribute" to name what fails to load:
        `OUTLIVE_AGENT_MODULES`, for agents not packaged yet). Code that fails to import is
        logged and its agents marked unavailable; the others load."""
        found: list[Agent[Any]] = []
        unavailable: dict[str, str] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                agent = ep.load()
                if not isinstance(agent, Agent):
                    raise TypeError(f"entry point {ep.value} is not an outlive Agent")
            except Exception as exc:  # noqa: BLE001 (one agent's code must not stop the others)
                unavailable[ep.name] = _failed(ep.value, exc)
                continue
            found.append(agent)
        for entry in modules:
            name, _, path = entry.rpartition("=")
            try:
                found.extend(_load(path))
            except Exception as exc:  # noqa: BLE001 (one agent's code must not stop the others)
                unavailable[name or path] = _failed(path, exc)
        return cls(found, unavailable)

    def __len__(self) -> int:
        return len(self._agents)

    def __iter__(self) -> Any:
        return iter(sorted(self._agents.values(), key=lambda a: a.name))

    def get(self, name: str) -> Agent[Any] | None:
        return self._agents.get(name)

    def check_signal(self, agent: str, name: str, payload: Any, wait_id: str | None) -> None:
        """`BadUserInput` for a signal that a run of `agent` does not take (`Agent.signals`);
        an agent not installed here declares nothing."""
        found = self._agents.get(agent)
        if found is not None:
            found.check_signal(name, payload, wait_id)

    def require(self, name: str) -> Agent[Any]:
        agent = self._agents.get(name)
        if agent is None:
            if name in self.unavailable:
                raise BadUserInput(
                    f"agent {name!r} is unavailable: its code failed to load"
                    f" ({self.unavailable[name]})"
                )
            known = ", ".join(sorted(self._agents)) or "none"
            raise BadUserInput(f"unknown agent {name!r} (known: {known})")
        return agent
