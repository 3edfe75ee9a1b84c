"""The ports: every interface a service is given instead of a queue library, declared here once.

`Db` is the one interface every statement runs through (`Sessions`, `StatementUnit` and
`UnitOfWork` implement it, in `outlive.db.tx`). `JobProducer`, `Admission` and `RunInstances`
are the queue as the domain sees it: the jobs queue, the per-tenant dispatch, and the workflow
engine that runs a run. Their implementations live above this layer (`outlive.jobs.producer`,
`outlive.services.admission`, `outlive.jobs.run_instances`) and are built once by the runtime
(`outlive.runtime`), which gives them to `Sessions` (and so to every unit of work) and to what
else uses them (the relay, the API's `Services`, a worker's deps). Nothing looks a port up, and
no `None` stands in for one that is not wired: a process without queues (a `cli` command, a
test) gets the named stand-ins `NO_JOBS` and `NO_INSTANCES` (queuing a job or starting a run
raises: nothing runs inline) and `NO_ADMISSION` (no tenant is capped, a dispatch admits
nothing). `PendingNudge` is what a unit
wants announced, and `NudgeSink` where it goes (`drop_nudges` when realtime is not wired).
`TimeSource` is the time the schedules' clock reads (`REAL_TIME` but in a test harness).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from outlive.config import Settings
from outlive.db.drivers import Row
from outlive.db.raw import Statement
from outlive.ids import RunId

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PendingNudge:
    """What a unit of work wants announced; turned into a realtime `Nudge` by the sink."""

    type: str
    tenant_id: UUID
    id: UUID | None


NudgeSink = Callable[[Sequence[PendingNudge]], Awaitable[None]]


class JobProducer(Protocol):
    """The jobs queue as a unit of work sees it (implemented in `outlive.jobs.producer`)."""

    def build(self, type: str, payload: Mapping[str, Any], *, key: str | None = None) -> Any:
        """The validated envelope; raises at the call site for an unknown type or bad payload.
        With a `key`, the envelope's id (the queue's job key) is derived from it: enqueueing
        the same (type, key) again is a no-op while that job is queued, scheduled or running."""

    async def send(self, envelopes: Sequence[Any], *, delay_s: float = 0.0) -> None:
        """Enqueue them (due in `delay_s`); raises `QueueUnavailable` when the queue cannot be
        reached."""

    async def bring_forward(self, envelope: Any) -> bool:
        """The envelope's job, scheduled for later (a retry's backoff), due now; when there is
        no such job, the envelope is sent (a no-op while its job is queued or running). True
        when a scheduled job was brought forward. Raises `QueueUnavailable` like `send`."""


class UnwiredJobs:
    """`NO_JOBS`: the jobs queue of a process that has none; queuing a job raises at the call
    site (nothing ever runs inline instead)."""

    def build(self, type: str, payload: Mapping[str, Any], *, key: str | None = None) -> Any:
        raise RuntimeError(f"no jobs queue is wired for {type!r}: nothing runs inline")

    async def send(self, envelopes: Sequence[Any], *, delay_s: float = 0.0) -> None:
        raise RuntimeError("no jobs queue is wired: nothing runs inline")

    async def bring_forward(self, envelope: Any) -> bool:
        raise RuntimeError("no jobs queue is wired: nothing runs inline")


NO_JOBS: JobProducer = UnwiredJobs()


@dataclass(frozen=True)
class Limits:
    """The deployment's caps (`OUTLIVE_TENANT_MAX_RUNNING_RUNS`, `…_MAX_INFLIGHT_JOBS`) and the
    number of installed agents; a tenant's own override wins over either cap."""

    max_running_runs: int
    max_inflight_jobs: int
    agents: int  # installed agents: a tenant whose run cap is at least this never waits

    @classmethod
    def of(cls, settings: Settings, agents: int) -> Limits:
        return cls(settings.tenant_max_running_runs, settings.tenant_max_inflight_jobs, agents)

    def runs_capped(self, override: int | None) -> bool:
        """True when a tenant with this cap override can have runs waiting for a slot."""
        cap = self.max_running_runs if override is None else override
        return cap < self.agents


class Admission(Protocol):
    """Per-tenant admission (implemented in `outlive.services.admission`): what a unit calls
    after its commit when it freed a slot or added waiting work."""

    @property
    def limits(self) -> Limits:
        """The caps it admits under."""

    async def dispatch_runs(self, tenant_id: UUID) -> Sequence[UUID]:
        """Admit and enqueue the tenant's waiting runs, up to its cap."""

    async def dispatch_jobs(self, tenant_id: UUID) -> Sequence[tuple[str, UUID]]:
        """Admit and enqueue the tenant's waiting deliveries and emails, up to its cap."""


class UnwiredAdmission:
    """`NO_ADMISSION`: admission in a process without queues. No cap is known (0, with no
    agents: no run is ever written waiting for a slot), and a dispatch admits nothing."""

    limits = Limits(max_running_runs=0, max_inflight_jobs=0, agents=0)

    async def dispatch_runs(self, tenant_id: UUID) -> Sequence[UUID]:
        log.debug("no admission is wired: tenant %s's waiting runs stay waiting", tenant_id)
        return []

    async def dispatch_jobs(self, tenant_id: UUID) -> Sequence[tuple[str, UUID]]:
        log.debug("no admission is wired: tenant %s's waiting jobs stay waiting", tenant_id)
        return []


NO_ADMISSION: Admission = UnwiredAdmission()


class InstanceState(enum.StrEnum):
    ACTIVE = "active"  # queued, scheduled for a retry, or executing
    FINISHED = "finished"  # the engine considers it done (complete, failed, aborted)
    MISSING = "missing"  # the engine has no record of it


class RunInstances(Protocol):
    """The workflow engine, as the run services see it: the instance id is the run id."""

    async def start(self, run_id: RunId) -> None:
        """Create the instance; raises `QueueUnavailable` when the engine cannot be reached."""

    async def resume(self, run_id: RunId) -> None:
        """`start` for a run that was woken (its timer fired, or a signal came): its instance
        goes ahead of the instances that have not started yet, so a wake is not late by the
        backlog of new runs."""

    async def states(self, run_ids: Sequence[RunId]) -> list[InstanceState]:
        """The engine's view of each instance, in order."""

    async def redeliver(self, run_ids: Sequence[RunId]) -> int:
        """The process executing these instances is gone (PostgreSQL says so): deliver each one
        again now, whatever the engine believes (its job still looks active on the dead
        worker). How many were handed again; raises `QueueUnavailable` when the engine cannot be
        reached."""


class UnwiredInstances:
    """`NO_INSTANCES`: the workflow engine of a process that has no run queue; starting or asking
    about a run raises at the call site."""

    async def start(self, run_id: RunId) -> None:
        raise RuntimeError(f"no run queue is wired: run {run_id} is never started inline")

    async def resume(self, run_id: RunId) -> None:
        await self.start(run_id)

    async def states(self, run_ids: Sequence[RunId]) -> list[InstanceState]:
        raise RuntimeError("no run queue is wired")

    async def redeliver(self, run_ids: Sequence[RunId]) -> int:
        raise RuntimeError("no run queue is wired")


NO_INSTANCES: RunInstances = UnwiredInstances()


async def drop_nudges(_: Sequence[PendingNudge]) -> None:
    """The sink when realtime is not wired: nudges are optional by design."""


class Db(Protocol):
    """Where a statement runs: `Sessions` (outside any unit), `StatementUnit` and `UnitOfWork`.

    The driver is the implementation's business: a prepared `Statement` runs on the raw asyncpg
    pool when there is one and no transaction is open, through the SQLAlchemy session inside a
    transaction. Parameters are by name; results come back as mappings by column name."""

    async def one(self, statement: Statement, /, **params: Any) -> Row | None:
        """The first row, or None when there is none."""

    async def all(self, statement: Statement, /, **params: Any) -> list[Row]:
        """Every row."""

    async def execute(self, statement: Statement, /, **params: Any) -> int:
        """Run it for its effect: the number of rows it touched."""


class TimeSource(Protocol):
    """The time the schedules' clock reads (what is due, where a cursor starts, `scheduledFor`
    of a trigger): PostgreSQL's `now()` in SQL, the process's clock in Python, each `ahead()`
    of the real time by the same amount. `REAL_TIME` (zero) everywhere but in a test harness,
    whose fake clock (`outlive.testing.Clock`) is ahead by the time it skipped."""

    def ahead(self) -> timedelta: ...


class RealTime:
    """The real time: nothing skipped."""

    def ahead(self) -> timedelta:
        return timedelta(0)


REAL_TIME: TimeSource = RealTime()


def now_of(time: TimeSource) -> datetime:
    """The time `time` reads, in Python."""
    return datetime.now(UTC) + time.ahead()
