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

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from outlive.agents.context import ModelCallMark, OutputStream, RunContext
from outlive.agents.versions import check_version, code_hash
from outlive.config import BUILTIN_AGENTS, Settings
from outlive.db.models import RunConflict
from outlive.errors import BadUserInput

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "outlive.agents"
BUILTIN_MODULE = "outlive.agents."  # the package's own agents (`demo`, `llm`)
MAX_INPUT_BYTES = 64 * 1024

# Re-exported: agents import what their `ctx` is from here (`outlive.agents.context` holds it).
__all__ = [
    "Agent",
    "AgentRegistry",
    "ModelCallMark",
    "OutputStream",
    "RunContext",
    "Signal",
]

P = TypeVar("P", bound=BaseModel)
T = TypeVar("T")


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
    # Its code version (contract §7 "Versions"; `outlive.agents.versions`): declared here (1 to
    # 64 characters: "2026-12-06", a release tag), else a hash of its code, taken when first asked.
    version: str | None = field(default=None, compare=False)
    # Modules its runs need that the definition does not import (heavy ones: a model SDK): a
    # worker imports them in a thread once it is up and quiet (`AgentRegistry.warm_up`, called
    # by `outlive.worker` once it has held no job for a second), the API never;
    # `run` gets them with `await imported(name)`, at once when warm, never on the event loop.
    warm: tuple[str, ...] = ()
    input_schema: dict[str, Any] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_schema", self.input_model.model_json_schema(by_alias=True))
        if self.version is not None:
            check_version(self.version)

    @property
    def code_version(self) -> str:
        """`Agent.codeVersion`: the declared `version`, else a stable hash of its code (the
        source of the module its `run` is defined in, and its input schema)."""
        found = self.__dict__.get("_code_version")
        if found is None:
            found = self.version or code_hash(self.name, self.input_schema, self.run)
            object.__setattr__(self, "_code_version", found)
        return str(found)

    def validate(
        self, raw: Mapping[str, Any] | None, *, settings: Settings | None = None
    ) -> dict[str, Any]:
        """The input as stored on the row, or `BadUserInput` saying what is wrong. `settings`
        (given at every start) reach the input model's validators as the context: what a
        deployment allows (the `llm` agent's models) is checked before anything is written."""
        if raw is not None and not isinstance(raw, Mapping):
            raise BadUserInput(f"input for agent {self.name!r} must be a JSON object")
        if len(json.dumps(raw or {})) > MAX_INPUT_BYTES:
            raise BadUserInput(f"input for agent {self.name!r} is over {MAX_INPUT_BYTES} bytes")
        context = None if settings is None else {"settings": settings}
        try:
            params = self.input_model.model_validate(raw or {}, context=context)
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


async def imported(name: str) -> ModuleType:
    """The module `name`, imported in a thread when it is not yet (or is being imported by the
    warm-up: that thread's import is waited for, off the event loop)."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is not None and not getattr(spec, "_initializing", False):
        return module
    return await asyncio.to_thread(import_module, name)


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
    def from_entry_points(
        cls, modules: Iterable[str] = (), *, builtin: Iterable[str] = BUILTIN_AGENTS
    ) -> AgentRegistry:
        """The installed agents (entry points), and those named by `modules` ("module:attribute",
        an Agent or a list of Agents, or "name=module:attribute" to name what fails to load:
        `OUTLIVE_AGENT_MODULES`, for agents not packaged yet). Of the package's own agents, only
        those named in `builtin` (`OUTLIVE_BUILTIN_AGENTS`). Code that fails to import is logged
        and its agents marked unavailable; the others load."""
        served = set(builtin)
        found: list[Agent[Any]] = []
        unavailable: dict[str, str] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.value.startswith(BUILTIN_MODULE) and ep.name not in served:
                continue  # a built-in this deployment leaves out: never even imported
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

    async def warm_up(self) -> None:
        """Import every agent's `warm` modules, in a thread (the loop goes on meanwhile); one
        that fails is logged, and its runs fail as they would have on importing it."""
        for name in dict.fromkeys(m for agent in self._agents.values() for m in agent.warm):
            try:
                await imported(name)
            except Exception:
                log.exception("warming %s failed; the runs that need it will fail", name)

    def __len__(self) -> int:
        return len(self._agents)

    def __iter__(self) -> Any:
        return iter(sorted(self._agents.values(), key=lambda a: a.name))

    def get(self, name: str) -> Agent[Any] | None:
        return self._agents.get(name)

    def version_of(self, name: str) -> str | None:
        """The code version of agent `name` served here (None: not installed here)."""
        agent = self._agents.get(name)
        return None if agent is None else agent.code_version

    @property
    def versions(self) -> str:
        """Each agent's code version, by name, as a JSON object (what a claim records)."""
        found = self.__dict__.get("_versions")
        if found is None:
            found = json.dumps({a.name: a.code_version for a in self._agents.values()})
            self.__dict__["_versions"] = found
        return str(found)

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
