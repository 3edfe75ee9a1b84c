"""What the jobs queue's handlers receive, and the saq context both saq workers run with.

A handler module imports `JobDeps` from here, and `outlive.jobs.handlers` builds its table of
`Handler`s from those modules: nothing here imports a handler, so there is no import circle.

The saq context carries one key of ours, `outlive`, typed per worker: the runs worker's holds a
`RunsWorker` (`.workflows`), the jobs worker's a `JobsWorker` (`.jobs`, and `.cron` for the
ticks, see `outlive.cron.deps`). `outlive.worker` puts one object with all three there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, Required

import httpx
from saq.types import Context

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.ports import NO_INSTANCES, RunInstances
from outlive.db.tx import Sessions
from outlive.jobs.envelopes import ENVELOPES, EnvelopeTypes
from outlive.jobs.mailer import Mailer
from outlive.services.ratelimits import RateLimiter
from outlive.workflows.runs import WorkflowDeps


@dataclass(frozen=True)
class Handler:
    """One envelope type's handler: `handle(deps, payload)`, and `give_up(deps, payload, error)`
    once the retries run out; `retrying(deps, payload, delay_s)`, if any, is told when a failed
    attempt's retry is due (its row can say so)."""

    handle: Callable[[Any, Any], Awaitable[None]]
    give_up: Callable[[Any, Any, str], Awaitable[None]]
    retrying: Callable[[Any, Any, float], Awaitable[None]] | None = None


@dataclass
class JobDeps:
    sessions: Sessions
    http: httpx.AsyncClient
    settings: Settings
    mailer: Mailer
    handlers: dict[str, Handler]
    instances: RunInstances = NO_INSTANCES  # for jobs that start runs (replays)
    limiter: RateLimiter | None = None  # replays take from the tenant's startRun bucket
    agents: AgentRegistry = field(default_factory=AgentRegistry.from_entry_points)
    types: EnvelopeTypes = field(default_factory=lambda: ENVELOPES)

    def __post_init__(self) -> None:
        missing = set(self.types.payloads) ^ set(self.handlers)
        if missing:
            raise RuntimeError(f"envelope types and handlers disagree on {sorted(missing)}")


class JobsWorker(Protocol):
    @property
    def jobs(self) -> JobDeps: ...


class RunsWorker(Protocol):
    @property
    def workflows(self) -> WorkflowDeps: ...


class JobsContext(Context, total=False):
    """The jobs worker's saq context."""

    outlive: Required[JobsWorker]


class RunsContext(Context, total=False):
    """The runs worker's saq context."""

    outlive: Required[RunsWorker]
    parked: bool  # the delivery's attempt parked its run (`run_instances.after_parking`)
