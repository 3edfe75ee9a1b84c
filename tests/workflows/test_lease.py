"""The lease in the row: a live attempt is never claimed from under itself, whatever the queue
delivers; a dead one is taken over, counted, and cannot loop forever."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from outlive.agents.registry import AgentRegistry
from outlive.db.models import RunStatus
from outlive.db.tx import PendingNudge, Sessions
from outlive.ids import RunId
from outlive.services import runs as runs_service
from outlive.services.runs import claim_run
from outlive.services.runs.reads import MAX_EVENTS_PAGE
from outlive.workflows.runs import RetryLater, WorkflowDeps, run_attempt
from tests.conftest import make_settings, with_own_database
from tests.support import Servers, TenantHandle
from tests.workflows.test_claim import expire_lease, read

DEMO = AgentRegistry.from_entry_points()


class Control:
    """The engine's side of an attempt, as `run_attempt` sees it (`AttemptControl`)."""

    def __init__(self) -> None:
        self.heartbeats = 0
        self.given_back = False
        self.parked_once = False
        self._beat = asyncio.Condition()

    async def heartbeat(self) -> None:
        async with self._beat:
            self.heartbeats += 1
            self._beat.notify_all()

    async def until_heartbeats(self, count: int) -> None:
        async with self._beat:
            await self._beat.wait_for(lambda: self.heartbeats >= count)

    def is_shutting_down(self) -> bool:
        return False

    def give_back_attempt(self) -> None:
        self.given_back = True

    def parked(self) -> None:
        self.parked_once = True


class Moves:
    """The nudges of this process's units, so a test waits for a run to move, not a clock."""

    def __init__(self) -> None:
        self._moved = asyncio.Condition()

    async def sink(self, nudges: Sequence[PendingNudge]) -> None:
        async with self._moved:
            self._moved.notify_all()

    async def until(
        self, sessions: Sessions, tenant: TenantHandle, run_id: RunId, predicate: Any
    ) -> runs_service.RunRecord:
        async with asyncio.timeout(10):
            while True:
                async with self._moved:
                    run = await read(sessions, tenant, run_id)
                    if predicate(run):
                        return run
                    await self._moved.wait()


@pytest.fixture
def moves() -> Moves:
    return Moves()


@pytest.fixture
async def servers(servers: Servers) -> Servers:
    """A database of this module's own: its runs are left QUEUED and released on purpose, and a
    relay anywhere on a shared database would hand them to its workers (a fast-tier run once saw
    one of them claimed by another attempt between the test's two reads)."""
    return await with_own_database(servers)


@pytest.fixture
async def deps(servers: Servers, sessions: Sessions, moves: Moves) -> AsyncIterator[WorkflowDeps]:
    # A short lease: heartbeats every 0.2 s, a lease that dies 0.6 s after the last one.
    settings = make_settings(servers, run_heartbeat_s=0.6, run_retry_delay_s=0.01)
    wired = sessions.wired(nudge_sink=moves.sink)
    async with httpx.AsyncClient() as http:
        yield WorkflowDeps(sessions=wired, agents=DEMO, http=http, settings=settings)


async def start(sessions: Sessions, tenant: TenantHandle, params: dict[str, Any]) -> RunId:
    from tests.workflows.test_claim import NoInstances

    async with sessions.unit(tenant.id) as uow:
        started = await runs_service.start_run(
            uow, agent="demo", params=params, instances=NoInstances()
        )
    return started.run.id


async def timeline(sessions: Sessions, run_id: RunId) -> list[tuple[str, dict[str, Any]]]:
    events = await runs_service.list_events(sessions, run_id, first=MAX_EVENTS_PAGE)
    return [(e.type, e.data) for e in events]


async def deliver(deps: WorkflowDeps, run_id: RunId, control: Control | None = None) -> str:
    """One delivery of the run's instance: what it ended with."""
    try:
        await run_attempt(deps, run_id, control or Control())
    except RetryLater as later:
        return "retry later" if not later.counts else "retry"
    return "done"


async def test_two_deliveries_at_once_execute_the_run_once(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await start(sessions, tenant, {"turns": 3, "delayMs": 100})
    outcomes = await asyncio.gather(deliver(deps, run_id), deliver(deps, run_id))
    assert sorted(outcomes) == ["done", "retry later"]
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert run.attempt == 1
    assert [t for t, _ in await timeline(sessions, run_id)] == [
        "claimed",
        "turn",
        "step",
        "turn",
        "step",
        "turn",
        "step",
        "succeeded",
    ]


async def test_heartbeats_keep_a_long_turn_s_lease_alive(
    deps: WorkflowDeps, moves: Moves, sessions: Sessions, tenant: TenantHandle
) -> None:
    # One turn of 2 s: no event for 2 s, more than three leases; only heartbeats keep it.
    run_id = await start(sessions, tenant, {"turns": 1, "delayMs": 2000})
    control = Control()
    first = asyncio.create_task(deliver(deps, run_id, control))
    claimed = await moves.until(sessions, tenant, run_id, lambda r: r.status == RunStatus.RUNNING)
    await control.until_heartbeats(4)  # 0.8 s since the claim: its first lease is long gone
    assert await deliver(deps, run_id) == "retry later"  # a second delivery, mid-turn
    during = await read(sessions, tenant, run_id)
    assert await first == "done"
    assert during.attempt == 1
    assert during.lease_expires_at is not None
    assert claimed.lease_expires_at is not None
    assert during.lease_expires_at > claimed.lease_expires_at
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert run.lost_attempts == 0


async def test_an_attempt_whose_lease_was_taken_over_stops_without_settling(
    deps: WorkflowDeps, moves: Moves, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await start(sessions, tenant, {"turns": 2, "delayMs": 1500})
    first = asyncio.create_task(deliver(deps, run_id))
    await moves.until(sessions, tenant, run_id, lambda r: r.status == RunStatus.RUNNING)
    await expire_lease(sessions, run_id)  # as if attempt 1 had stalled past its lease
    async with sessions.unit() as uow:
        taken = await claim_run(uow, run_id, lease_s=30)
    assert taken is not None
    assert taken.attempt == 2
    assert await asyncio.wait_for(first, timeout=5) == "done"  # it stopped at its next heartbeat
    events = await timeline(sessions, run_id)
    assert events == [
        ("claimed", {"attempt": 1}),
        ("lost", {"attempt": 1, "reason": "its worker stopped heartbeating and the lease expired"}),
        ("claimed", {"attempt": 2}),
    ]
    run = await read(sessions, tenant, run_id)
    assert (run.status, run.attempt, run.lost_attempts) == (RunStatus.RUNNING, 2, 1)


async def test_lost_attempts_do_not_use_up_the_retries_of_a_run(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    # Attempts 1 and 2 lose their worker; attempt 3 meets a retryable fault; attempt 4 succeeds.
    run_id = await start(sessions, tenant, {"turns": 1, "delayMs": 0, "flakyAttempts": 3})
    for _ in range(2):
        async with sessions.unit() as uow:
            assert await claim_run(uow, run_id, lease_s=30) is not None
        await expire_lease(sessions, run_id)
    assert await deliver(deps, run_id) == "retry"
    assert await deliver(deps, run_id) == "done"
    run = await read(sessions, tenant, run_id)
    assert (run.status, run.attempt, run.lost_attempts) == (RunStatus.SUCCEEDED, 4, 2)
    types = [t for t, _ in await timeline(sessions, run_id)]
    lost_twice = ["claimed", "lost", "claimed", "lost"]
    assert types == [*lost_twice, "claimed", "retrying", "claimed", "turn", "step", "succeeded"]


async def test_a_run_that_keeps_losing_its_worker_fails_saying_so(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await start(sessions, tenant, {"turns": 1, "delayMs": 0})
    for _ in range(3):
        async with sessions.unit() as uow:
            assert await claim_run(uow, run_id, lease_s=30) is not None
        await expire_lease(sessions, run_id)
    assert await deliver(deps, run_id) == "done"  # it takes over a third lost lease, and gives up
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.FAILED
    assert run.lost_attempts == 3
    assert run.error is not None
    assert "its worker was lost 3 times" in run.error
    types = [t for t, _ in await timeline(sessions, run_id)]
    assert types.count("lost") == 3
    assert types[-1] == "failed"
    assert "turn" not in types


async def test_the_lease_is_cleared_when_the_run_is_requeued_or_settled(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await start(sessions, tenant, {"turns": 1, "delayMs": 0, "flakyAttempts": 1})
    assert await deliver(deps, run_id) == "retry"
    requeued = await read(sessions, tenant, run_id)
    assert (requeued.status, requeued.lease_expires_at) == (RunStatus.QUEUED, None)
    assert await deliver(deps, run_id) == "done"
    settled = await read(sessions, tenant, run_id)
    assert (settled.status, settled.lease_expires_at) == (RunStatus.SUCCEEDED, None)
    assert settled.heartbeat_at is not None


async def test_only_lost_attempts_that_completed_no_step_count_towards_failing_a_run(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    """CONTRACT §7, round four. Attempts 1 and 3 record a step before their worker is lost;
    attempts 2, 4 and 5 record none: only the fifth loss makes three that count."""
    run_id = await start(sessions, tenant, {"turns": 1, "delayMs": 0})
    for attempt in range(1, 6):
        async with sessions.unit() as uow:
            assert await claim_run(uow, run_id, lease_s=30) is not None
            if attempt in (1, 3):
                await runs_service.record_step(
                    uow,
                    run_id,
                    attempt=attempt,
                    lease_s=30,
                    name="w",
                    occurrence=attempt,
                    result="1",
                )
        await expire_lease(sessions, run_id)
        async with sessions.unit() as uow:
            barren = await runs_service.barren_losses(uow, run_id, losing=attempt)
        assert barren == {1: 0, 2: 1, 3: 1, 4: 2, 5: 3}[attempt]  # as reconcile counts them
    assert await deliver(deps, run_id) == "done"  # takes over the fifth lost lease, gives up
    run = await read(sessions, tenant, run_id)
    assert (run.status, run.lost_attempts) == (RunStatus.FAILED, 5)
    assert run.error is not None
    assert "its worker was lost 3 times without completing a step" in run.error


class Stopping(Control):
    """The engine of a worker that is stopping (SIGTERM)."""

    def is_shutting_down(self) -> bool:
        return True


async def test_a_stopping_worker_never_leaves_a_run_running_wherever_the_cancel_lands(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    """The stop cancels an attempt wherever it is: before its claim, while its claim or its
    settle is on the wire (PostgreSQL committed it, the answer is not read yet), or while it
    executes. Wherever, the run ends QUEUED (released, its attempt given back) or settled:
    never RUNNING under a process about to end, for another worker to take over as lost."""
    seen: set[str] = set()
    for step in range(60):
        run_id = await start(sessions, tenant, {"turns": 1, "delayMs": 0})
        control = Stopping()
        attempt = asyncio.create_task(run_attempt(deps, run_id, control))
        await asyncio.sleep(step * 0.0005)  # the cancel lands a little later each time
        attempt.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await attempt
        run = await read(sessions, tenant, run_id)
        assert run.status in (RunStatus.QUEUED, RunStatus.SUCCEEDED), (step, run.status)
        kinds = [kind for kind, _ in await timeline(sessions, run_id)]
        if run.status == RunStatus.QUEUED and "claimed" in kinds:
            assert kinds[-1] == "released", await timeline(sessions, run_id)
            assert (run.attempt, control.given_back) == (0, True)
        seen.add("released" if "released" in kinds else run.status.value)
    assert "released" in seen, seen  # the sweep did land inside an attempt
