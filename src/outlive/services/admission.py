"""Admission: per-tenant caps, enforced in PostgreSQL, that make dispatch fair across tenants.

A tenant has at most `max_running_runs` runs in flight (RUNNING, or QUEUED and admitted: its saq
job exists) and at most `max_inflight_jobs` webhook deliveries and emails in the jobs queue
(`OUTLIVE_TENANT_MAX_RUNNING_RUNS` / `OUTLIVE_TENANT_MAX_INFLIGHT_JOBS`, overridden per tenant with
`outlive tenant set-limits`). What is over the cap is written waiting (`dispatched_at` NULL) and
never reaches the queue: saq's FIFO only ever holds a bounded number of each tenant's items, so a
tenant that floods cannot push another tenant's work to the back of a long line. In effect the
queue serves tenants round robin, in quanta of their caps (a larger cap is a larger weight).

The only way in is a dispatch function (`outlive_dispatch_runs`, `outlive_dispatch_jobs`; their
source is `outlive/db/functions/*.sql`, installed by migrations): it locks the tenant's row, counts
what is in flight with a fresh snapshot, and admits the oldest waiting rows up to the cap. Every
place that frees a slot (a settle, a finished delivery or email) calls it after its commit, and so
does every place that adds waiting work, so one of the two always sees the other: nothing waits for
a slot that is free, and no two dispatchers hand out the same slot, however many processes there
are.

One shortcut keeps the common case at one statement: a run can only wait when its tenant's cap is
below the number of installed agents (there is at most one active run per tenant and agent), so
below that the run is admitted by the INSERT itself and no dispatch is needed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import RunStatus
from outlive.db.ports import JobProducer, Limits, RunInstances
from outlive.db.raw import prepare
from outlive.db.tx import Sessions
from outlive.errors import QueueUnavailable
from outlive.ids import RunId, TenantId
from outlive.services import outbox, relay, runs
from outlive.services.coalesce import Coalesced, retrieved

log = logging.getLogger(__name__)
T = TypeVar("T")

_DISPATCH_RUNS = prepare(text("SELECT outlive_dispatch_runs(:tenant_id, :default_cap) AS id"))
_DISPATCH_JOBS = prepare(
    text("SELECT kind, id FROM outlive_dispatch_jobs(:tenant_id, :default_cap)")
)


class TenantAdmission:
    """The dispatcher the runtime builds once and gives to `Sessions` (and so to every unit of
    work), to the relay and to the API's services: the `Admission` port."""

    def __init__(
        self, sessions: Sessions, instances: RunInstances, jobs: JobProducer, limits: Limits
    ) -> None:
        self._sessions = sessions
        self._instances = instances
        self._jobs = jobs
        self.limits = limits
        # One dispatch statement of a tenant's runs (and one of its jobs) in flight per
        # process, and one after it for every caller meanwhile: not one per settle queued on the
        # tenant's row. The enqueue of what it admitted is not part of it (the next statement
        # need not wait for Redis); every caller that shares the statement awaits that enqueue.
        self._runs = Coalesced(self._admit_runs)
        self._jobs_of = Coalesced(self._admit_jobs)

    async def dispatch_runs(self, tenant_id: UUID) -> list[RunId]:
        """Admit the tenant's waiting runs up to its cap and enqueue them (`Coalesced`: with
        one in flight, the caller shares the next one). Should the queue be unreachable, the
        runs it could not take stay admitted and go to the relay (`services.relay`), which
        hands them once the queue is back: a Redis outage delays a run, it never fails one."""
        return await asyncio.shield(await self._runs(tenant_id))

    async def dispatch_jobs(self, tenant_id: UUID) -> list[tuple[str, UUID]]:
        """Admit the tenant's waiting deliveries and emails up to its cap and enqueue them
        (`Coalesced`, as runs). When the queue is unreachable, they stay admitted and PENDING
        and go to the relay, which hands them once the queue is back (nothing is failed,
        nothing raised)."""
        return await asyncio.shield(await self._jobs_of(tenant_id))

    async def _admit_runs(self, tenant_id: UUID) -> asyncio.Future[list[RunId]]:
        rows = await self._sessions.all(
            _DISPATCH_RUNS, tenant_id=tenant_id, default_cap=self.limits.max_running_runs
        )
        return _handing([RunId(row["id"]) for row in rows], self._hand_runs)

    async def _hand_runs(self, admitted: list[RunId]) -> None:
        for done, run_id in enumerate(admitted):
            try:
                await self._instances.start(run_id)
            except QueueUnavailable:
                left = admitted[done:]
                log.warning("%d admitted run(s) go to the relay: no queue", len(left))
                await runs.handoff_failed_runs(self._sessions, left)
                return

    async def _admit_jobs(self, tenant_id: UUID) -> asyncio.Future[list[tuple[str, UUID]]]:
        rows = await self._sessions.all(
            _DISPATCH_JOBS, tenant_id=tenant_id, default_cap=self.limits.max_inflight_jobs
        )
        return _handing([(str(row["kind"]), UUID(str(row["id"]))) for row in rows], self._send)

    async def _send(self, admitted: list[tuple[str, UUID]]) -> None:
        jobs = self._jobs
        try:
            await jobs.send([outbox.job(jobs, kind, row_id) for kind, row_id in admitted])
        except QueueUnavailable:
            log.warning("%d admitted job(s) go to the relay: no queue", len(admitted))
            await relay.handoff_failed_jobs(self._sessions, admitted)


def _handing(
    admitted: list[T], hand: Callable[[list[T]], Awaitable[None]]
) -> asyncio.Future[list[T]]:
    """`admitted`, once `hand` gave them to the queue: a task of its own (started now), so that
    every caller sharing the dispatch awaits the same one, and none of them cancels it."""
    if not admitted:
        done: asyncio.Future[list[T]] = asyncio.get_running_loop().create_future()
        done.set_result(admitted)
        return done

    async def handed() -> list[T]:
        await hand(admitted)
        return admitted

    task = asyncio.ensure_future(handed())
    task.add_done_callback(retrieved)
    return task


_POSITION = prepare(
    text(
        """SELECT (SELECT count(*) FROM runs w
                    WHERE w.tenant_id = :tenant_id AND w.status = 'QUEUED'
                      AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                      AND (w.priority, w.created_at, w.id)
                          < (:priority, :created_at, :run_id)) + 1 AS position,
                  (SELECT max_running_runs FROM tenants WHERE id = :tenant_id) AS cap"""
    )
)


async def waiting_reason(
    sessions: Sessions,
    *,
    default_cap: int,
    tenant_id: TenantId,
    run_id: RunId,
    created_at: Any,
    priority: int = 3,
) -> str:
    """Why a run that was not admitted yet waits, and where it is in its tenant's line (the
    line is in priority order, then commit order)."""
    row = await sessions.one(
        _POSITION, tenant_id=tenant_id, run_id=run_id, created_at=created_at, priority=priority
    )
    assert row is not None  # noqa: S101 (a SELECT of two subqueries returns one row)
    cap = default_cap if row["cap"] is None else row["cap"]
    return (
        f"waiting for a slot: this tenant runs at most {cap} at a time; "
        f"{_ordinal(row['position'])} in line"
    )


class WaitingRun(Protocol):
    """What `waiting_reason_of` needs of a run (`services.runs.RunRecord`)."""

    @property
    def is_waiting(self) -> bool: ...
    @property
    def tenant_id(self) -> TenantId: ...
    @property
    def id(self) -> RunId: ...
    @property
    def created_at(self) -> Any: ...
    @property
    def handoff_failed_at(self) -> Any: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def queued_behind_id(self) -> RunId | None: ...
    @property
    def key(self) -> str: ...
    @property
    def not_before(self) -> Any: ...
    @property
    def priority(self) -> int: ...


async def waiting_reason_of(sessions: Sessions, run: WaitingRun, *, limits: Limits) -> str | None:
    """Why a QUEUED run is not running yet: the queue could not be reached to hand it over (the
    relay hands it once it is back), or where it is in line under its tenant's cap. None for
    any other run."""
    if run.status is RunStatus.QUEUED and run.queued_behind_id is not None:
        return (
            f"queued behind run {run.queued_behind_id} of its key {run.key!r}:"
            " runs of one key start one at a time, in order"
        )
    if run.status is RunStatus.QUEUED and run.handoff_failed_at is not None:
        return relay.WAITING_FOR_QUEUE
    if not run.is_waiting:
        return None
    if run.not_before is not None and run.not_before > datetime.now(UTC):
        return (
            f"debounced until {run.not_before.isoformat()}: a start of its key before then"
            " gives it that start's input and holds it longer"
        )
    return await waiting_reason(
        sessions,
        default_cap=limits.max_running_runs,
        tenant_id=run.tenant_id,
        run_id=run.id,
        created_at=run.created_at,
        priority=run.priority,
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
