"""The relay: PostgreSQL says what is due, the relay makes sure the queue holds it.

PostgreSQL is the only truth; the queue (saq on Redis) is a copy of the part of it that is due.
A mutation needs PostgreSQL only: it commits its row and then, as the fast path, enqueues the
row's job itself. Every QUEUED run and PENDING delivery or invitation that its tenant's admission
let in (`dispatched_at` set) carries `relay_after`: when the relay should next make sure that the
row's job is in the queue. It is 10 s after admission (by then the fast path has handed it), then
every `OUTLIVE_RELAY_RECHECK_S` while the row stays QUEUED or PENDING, and `now()` as soon as a
hand-off failed (`handoff_failed_runs`, `handoff_failed_jobs`: the queue was unreachable or did
not answer within `OUTLIVE_QUEUE_TIMEOUT_S`).

A relay runs in every worker (`outlive.jobs.relay` drives it). A pass first looks, in one
statement (`LOOK`), at which of the steps below have anything to do, and runs only those (all of
them after a queue that lost its data): an idle pass costs one statement. One pass:

1. renews a marker key in the queue's Redis; a missing marker means the queue lost its data (a
   FLUSHDB, a restart without persistence, a failover) or is new, and every row the relay may
   hand becomes due at once, and every RUNNING run's instance is enqueued again (its job went
   too: it waits for the holder's lease, so a worker that dies later still has a successor);
2. on the slow scan only, finds tenants whose waiting rows (`dispatched_at` NULL) are older than
   the first look while a slot is free, and calls their dispatch function: a dispatch missed
   because a process died between its commit and its dispatch is made up for, and the function
   still decides what is admitted (a run waiting for a slot is never "due");
3. takes up to `OUTLIVE_RELAY_BATCH` due rows in one statement (`FOR UPDATE SKIP LOCKED`, fair
   across tenants: the oldest due rows, each tenant's first before anyone's second), moving each
   one's `relay_after` to the next recheck before it hands it, so any number of relays hand each
   due row once;
4. enqueues them, keyed by the row (the run id, or the envelope id derived from the row): saq's
   enqueue is a no-op while a job with that key is queued, scheduled or running, and creates it
   when it is missing or finished. So handing a row whose job is alive costs nothing, and a row
   whose job vanished is queued again. An unreachable queue puts the rows back, due a second
   later.

Before step 3, a pass wakes the WAITING runs whose timer is due (a durable sleep, or a wait for
a signal that timed out): each goes back to QUEUED in one conditional update (still WAITING, its
row taken with `SKIP LOCKED`, so a signal or a cancel that got there first wins, and any number
of relays wake it once), with a `resumed {by: "timer" | "timeout"}` event, admitted at once
unless its tenant is capped, and handed to the queue after the commit (`hand_woken`), ahead of
the runs that have not started yet (`RunInstances.resume`: behind a backlog of new runs a timer
would fire late by the whole backlog). The timer
lives in PostgreSQL only: a Redis that lost its data loses no timer. `RelayLoop` sleeps no
longer than until the earliest timer (one probe of `ix_runs_wake`), and a run that parks wakes
it (NOTIFY), so a timer fires within a pass of its due time.

The relay's clock also fires the tenants' schedules (`services.schedules.fires`: each
occurrence once, tenant by tenant) and lets in the debounced runs whose hold ended (their
tenants' dispatch); `RelayLoop` sleeps no longer than until the earliest of either (a create, an
update, a resume or a debounced start NOTIFYs it).

Every `OUTLIVE_LIVENESS_CHECK_S` (0.5 s) the relay also asks PostgreSQL for RUNNING runs whose
worker process is gone: the run records its holder's liveness key, whose session-level lock
PostgreSQL frees when the process dies (`outlive.db.liveness`). Such a run's job still looks
active on the dead worker, so the relay delivers it again at once (`hand_orphans`), and that
delivery's claim takes the run over without waiting for its lease.

Nothing is settled, claimed or admitted here: the relay only hands over what PostgreSQL says is
due. It is not a sweeper cron repairing what nobody looks at: it copies due rows from the truth
to the queue, the way a transactional outbox relay does, and reconcile-on-read still repairs what
is read (a lost worker, a lease).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from outlive.db.ports import REAL_TIME, Admission, InstanceState, RunInstances, TimeSource
from outlive.db.tx import JobProducer, Sessions
from outlive.errors import QueueUnavailable
from outlive.ids import RunId
from outlive.services import outbox
from outlive.services.relay.lead import WakeLead
from outlive.services.relay.queries import (
    CHANNEL,
    CHUNK,
    FIRST_LOOK_S,
    HOLDS_ENDED,
    JOBS_HANDOFF_FAILED,
    KINDS,
    LOOK,
    MARK_ALL_DUE,
    MAX_TENANTS,
    MISSED_JOB_DISPATCHES,
    MISSED_RUN_DISPATCHES,
    NEXT,
    ORPHANED,
    QUEUE_TIMEOUT_S,
    RETRY_LATER,
    RETRY_S,
    RUNNING_RUNS,
    TAKE,
    WAITING_FOR_QUEUE,
    WINDOW,
)
from outlive.services.runs import handed, wake_due
from outlive.services.runs import handoff_failed_runs as handoff_failed_runs
from outlive.telemetry import metrics

__all__ = ["CHANNEL", "QUEUE_TIMEOUT_S", "WAITING_FOR_QUEUE", "Pass", "Relay", "Taken"]

log = logging.getLogger(__name__)


# The clock's hook (`services.schedules.fires.fire_due`, given by the worker): fire up to a batch
# of due schedules, and say how many fired.
FireSchedules = Callable[[Sessions, RunInstances, int], Awaitable[int]]


class QueueMarker(Protocol):
    """A key in the queue's Redis that says the queue still has its data."""

    async def renew(self) -> bool:
        """Set the marker; True when it was missing (the queue lost its data, or is new).
        Raises `QueueUnavailable` when the queue cannot be reached."""


@dataclass(frozen=True, slots=True)
class Taken:
    kind: str  # "run", or an outbox kind (`outbox.KINDS`)
    id: UUID
    failed: bool  # its last hand-off had failed (runs: `handoff_failed_at`)


@dataclass(slots=True)
class Pass:
    """What one pass did."""

    taken: list[Taken] = field(default_factory=list)
    full: bool = False  # it took a whole batch: more may be due
    lost_queue: bool = False  # the marker was missing: every row was made due
    dispatched: int = 0  # rows admitted by the dispatches it made up for
    woken: int = 0  # WAITING runs whose timer fired
    fired: int = 0  # schedules fired (`services.schedules.fires`)
    next_wake_s: float | None = None  # seconds until the earliest timer still ahead


def _earliest(wake_s: Any, clock_s: Any) -> float | None:
    """Seconds until the earliest timer or clock event (a clock event already due: 0)."""
    found = [] if wake_s is None else [float(wake_s)]
    if clock_s is not None:
        found.append(max(0.0, float(clock_s)))
    return min(found) if found else None


class Look:
    """A pass's first look (`LOOK`), or none (`row` None: every part runs)."""

    def __init__(self, row: Mapping[str, Any] | None) -> None:
        self._row = row
        self.ran = False  # a part was run: the next timer is read again at the end

    def due(self, figure: str) -> bool:
        """Whether the part whose seconds-until-due is `figure` has anything to do now."""
        seconds = None if self._row is None else self._row[figure]
        run = self._row is None or (seconds is not None and seconds <= 0)
        self.ran |= run
        return run

    def waiting(self) -> bool:
        """Whether any row waits for admission (the missed-dispatch scan looks among those)."""
        run = self._row is None or bool(self._row["waiting"])
        self.ran |= run
        return run

    def next_wake_s(self) -> float | None:
        """`NEXT`'s figure from the look, when no part ran (so the earliest hold is ahead)."""
        assert self._row is not None  # noqa: S101 (a pass without a look ran every part)
        clock = [s for s in (self._row["fire_s"], self._row["hold_s"]) if s is not None]
        return _earliest(self._row["wake_s"], min(clock) if clock else None)


async def hand_woken(
    sessions: Sessions, instances: RunInstances, woken: Sequence[Mapping[str, Any]]
) -> None:
    """After the commit that woke them: enqueue the admitted runs, the latest timer first, ahead
    of the runs that have not started (`RunInstances.resume`; a queue that cannot take them
    leaves them to the relay). The tenants of the others were dispatched by that commit's unit
    (`runs.wake_due`, `runs.wake_by_signal`): their admission enqueues what it admits."""
    ordered = sorted(woken, key=lambda r: -float(r.get("late_s") or 0.0))
    admitted = [RunId(r["id"]) for r in ordered if r["admitted"]]
    for at in range(0, len(admitted), CHUNK):
        chunk = admitted[at : at + CHUNK]
        results = await asyncio.gather(
            *(instances.resume(run_id) for run_id in chunk), return_exceptions=True
        )
        failed = [r for r, e in zip(chunk, results, strict=True) if isinstance(e, Exception)]
        if failed:
            log.warning("%d woken run(s) go to the relay: no queue", len(failed))
            await handoff_failed_runs(sessions, failed)


# --- the fast path's failures -------------------------------------------------------------------


async def handoff_failed_jobs(sessions: Sessions, admitted: Sequence[tuple[str, UUID]]) -> None:
    """The queue could not take these deliveries or invitations: they stay PENDING (admitted),
    due for the relay now."""
    for kind, statement in JOBS_HANDOFF_FAILED.items():
        ids = [row_id for k, row_id in admitted if k == kind]
        if ids:
            await sessions.all(statement, ids=ids)


# --- the relay ----------------------------------------------------------------------------------


class Relay:
    """One worker's relay; `outlive.jobs.relay.RelayLoop` decides when it makes a pass."""

    def __init__(
        self,
        sessions: Sessions,
        instances: RunInstances,
        jobs: JobProducer,
        marker: QueueMarker,
        *,
        batch: int,
        recheck_s: float,
        default_runs_cap: int,
        default_jobs_cap: int,
        admission: Admission,
        lead: WakeLead,
        fire: FireSchedules | None = None,
        time: TimeSource = REAL_TIME,
    ) -> None:
        self._sessions = sessions
        self._fire = fire  # given the same `time` by the worker
        self._time = time  # what the schedules' fire times are read against
        self.lead = lead
        self._admission = admission
        self._instances = instances
        self._jobs = jobs
        self._marker = marker
        self.batch = batch
        self.recheck_s = recheck_s
        self._caps = {"run": default_runs_cap, "job": default_jobs_cap}

    async def run_pass(self, *, scan: bool = True) -> Pass:
        """One pass (see the module's docstring). `scan`: also make up for missed dispatches.
        Raises `QueueUnavailable` when the queue cannot be reached (nothing is lost: the rows it
        took are due again a second later).

        It starts with one look (`LOOK`) that says which parts have anything to do, and runs
        only those: an idle pass is one statement. After a queue that lost its data, every part
        runs."""
        done = Pass()
        if await self._marker.renew():
            done.lost_queue = True
            row = await self._sessions.one(MARK_ALL_DUE)
            handed = row["n"] if row else 0
            # A new queue (a first start, `outlive dev`) has nothing to hand: nothing is wrong.
            log.log(
                logging.WARNING if handed else logging.INFO,
                "the queue lost its data (or is new): %s row(s) are handed to it again",
                handed,
            )
            await self._hand_running()
        lead_s, ahead_s = self.lead.seconds, self._time.ahead().total_seconds()
        look = Look(
            None
            if done.lost_queue
            else await self._sessions.one(LOOK, lead=lead_s, ahead_s=ahead_s)
        )
        if scan and look.waiting():
            done.dispatched = await self._make_up_missed_dispatches()
        if look.due("wake_s"):
            done.woken = await self._wake_due(lead_s)
        if self._fire is not None and look.due("fire_s"):
            done.fired = await self._fire(self._sessions, self._instances, self.batch)
        if look.due("hold_s"):
            await self._end_holds()
        if look.due("due_s"):
            await self._take(done)
        done.full = done.full or done.woken >= self.batch or done.fired >= self.batch
        if look.ran:  # what it did may have moved the next timer: read it again
            row = await self._sessions.one(NEXT, lead=lead_s, ahead_s=ahead_s)
            assert row is not None  # noqa: S101 (a SELECT of two values: always one row)
            done.next_wake_s = _earliest(row["wake_s"], row["clock_s"])
        else:
            done.next_wake_s = look.next_wake_s()
        return done

    async def _take(self, done: Pass) -> None:
        """Take up to a batch of due rows of each kind and hand them to the queue."""
        rows = await self._sessions.all(
            TAKE, window=self.batch * WINDOW, batch=self.batch, recheck=self.recheck_s
        )
        done.taken = [Taken(str(r["kind"]), UUID(str(r["id"])), bool(r["failed"])) for r in rows]
        done.full = any(
            sum(1 for t in done.taken if t.kind == kind) >= self.batch for kind, _, _ in KINDS
        )
        if done.taken:
            await self._hand(done.taken)

    async def _end_holds(self) -> None:
        """Dispatch the tenants whose debounced runs' hold ended while a slot is free."""
        tenants = await self._sessions.all(
            HOLDS_ENDED, default_cap=self._caps["run"], tenants=MAX_TENANTS
        )
        for row in tenants:
            await self._admission.dispatch_runs(row["tenant_id"])

    async def _wake_due(self, lead_s: float) -> int:
        """Wake up to a batch of WAITING runs whose timer is due, a durable sleep's `lead_s`
        early (`lead.WakeLead`; see the module's docstring)."""
        woken = await wake_due(
            self._sessions, batch=self.batch, default_cap=self._caps["run"], lead_s=lead_s
        )
        self.lead.handed(len(woken))
        for row in woken:
            metrics.TIMER_LATENESS.observe(max(0.0, float(row["late_s"])))
        if woken:
            await hand_woken(self._sessions, self._instances, woken)
        return len(woken)

    async def _hand(self, taken: list[Taken]) -> None:
        jobs = [(t.kind, t.id) for t in taken if t.kind != "run"]
        producer = self._jobs
        try:
            runs = await self._not_in_queue(taken)
            for at in range(0, len(runs), CHUNK):
                chunk = runs[at : at + CHUNK]
                await asyncio.gather(*(self._instances.start(run_id) for run_id in chunk))
            for at in range(0, len(jobs), CHUNK):
                chunk_jobs = jobs[at : at + CHUNK]
                await producer.send([outbox.job(producer, k, row_id) for k, row_id in chunk_jobs])
        except QueueUnavailable:
            for kind, statement in RETRY_LATER.items():
                ids = [t.id for t in taken if t.kind == kind]
                if ids:
                    await self._sessions.all(statement, ids=ids, delay=RETRY_S)
            raise
        recovered = [t.id for t in taken if t.failed]
        if recovered:
            await handed(self._sessions, recovered)
            log.info("handed %d run(s) whose hand-off had failed", len(recovered))

    async def _hand_running(self) -> None:
        """The queue lost its data: the jobs of RUNNING runs went with it, and a worker that dies
        now would leave its run to nobody. Each RUNNING run's instance is enqueued again (a no-op
        where its job survived): its delivery waits for the holder's lease (`RetryLater`, not
        counted) and takes the run over only once that lease has expired."""
        running = [RunId(r["id"]) for r in await self._sessions.all(RUNNING_RUNS)]
        for at in range(0, len(running), CHUNK):
            chunk = running[at : at + CHUNK]
            await asyncio.gather(*(self._instances.start(run_id) for run_id in chunk))
        if running:
            log.warning("handed the instances of %d RUNNING run(s) again", len(running))

    async def hand_orphans(self) -> int:
        """RUNNING runs whose worker process is gone (its liveness lock is free in PostgreSQL:
        `outlive.db.liveness`): their jobs still look active on the dead worker, where nothing
        would deliver them before the sweep and the lease. Each one's instance is delivered
        again now, and that delivery's claim takes the run over. One statement when there are
        none. How many were handed; raises `QueueUnavailable` when the queue cannot be reached."""
        rows = await self._sessions.all(ORPHANED, batch=self.batch)
        if not rows:
            return 0
        handed = await self._instances.redeliver([RunId(r["id"]) for r in rows])
        if handed:
            log.warning("handed again %d run(s) whose worker process is gone", handed)
        return handed

    async def _not_in_queue(self, taken: list[Taken]) -> list[RunId]:
        """The runs to enqueue: every one whose hand-off failed, and of the others those the
        queue has no live job for (one pipelined read for all, cheaper than an enqueue each,
        which matters for a backlog of runs rechecked while they wait for a worker)."""
        failed = [RunId(t.id) for t in taken if t.kind == "run" and t.failed]
        rest = [RunId(t.id) for t in taken if t.kind == "run" and not t.failed]
        if not rest:
            return failed
        try:
            async with asyncio.timeout(QUEUE_TIMEOUT_S):
                states = await self._instances.states(rest)
        except TimeoutError as exc:
            raise QueueUnavailable("the run queue did not answer") from exc
        return failed + [
            r for r, s in zip(rest, states, strict=True) if s is not InstanceState.ACTIVE
        ]

    async def _make_up_missed_dispatches(self) -> int:
        admission = self._admission
        admitted = 0
        for statement, dispatch, cap in (
            (MISSED_RUN_DISPATCHES, admission.dispatch_runs, self._caps["run"]),
            (MISSED_JOB_DISPATCHES, admission.dispatch_jobs, self._caps["job"]),
        ):
            tenants = await self._sessions.all(
                statement, stale=FIRST_LOOK_S, default_cap=cap, tenants=MAX_TENANTS
            )
            for row in tenants:
                admitted += len(await dispatch(row["tenant_id"]))
        if admitted:
            log.info("admitted %d waiting row(s) whose dispatch was missed", admitted)
        return admitted
