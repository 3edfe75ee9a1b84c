"""The ports of the database layer: what a unit of work is handed, and what it hands on.

`Db` is the one interface every statement runs through (`Sessions`, `StatementUnit` and
`UnitOfWork` implement it, in `outlive.db.tx`). `JobProducer` and `Admission` are what a unit
calls after its commit (the jobs queue, the per-tenant dispatch); their implementations live
above this layer (`outlive.jobs.producer`, `outlive.services.admission`) and are given to
`Sessions` by the composition root. `PendingNudge` is what a unit wants announced, and
`NudgeSink` where it goes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from outlive.db.drivers import Row
from outlive.db.raw import Statement


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


class Admission(Protocol):
    """Per-tenant admission (implemented in `outlive.services.admission`): what a unit calls
    after its commit when it freed a slot or added waiting work."""

    max_running_runs: int  # the deployment's default cap of a tenant's runs in flight
    agents: int  # installed agents: at most one active run each, per tenant

    def runs_capped(self, override: int | None) -> bool:
        """True when a tenant with this cap override can have runs waiting for a slot."""

    async def dispatch_runs(self, tenant_id: UUID) -> Sequence[UUID]:
        """Admit and enqueue the tenant's waiting runs, up to its cap."""

    async def dispatch_jobs(self, tenant_id: UUID) -> Sequence[tuple[str, UUID]]:
        """Admit and enqueue the tenant's waiting deliveries and emails, up to its cap."""


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
