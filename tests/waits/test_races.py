"""Races around a wait, with real concurrency (two connections at once, many times): a signal
against the timer, against `cancelRun`, and against the wait being registered. Each has exactly
one outcome, every time, and no signal is ever lost. Also: a resume is not a retry."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import text

from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.ports import NO_ADMISSION
from outlive.db.tx import Sessions
from outlive.errors import RetryableFault, RunParked
from outlive.ids import RunId, TenantId
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue
from outlive.jobs.relay import RedisQueueMarker
from outlive.jobs.run_instances import SaqRunInstances
from outlive.services import runs as runs_service
from outlive.services import waits
from outlive.services.relay import Relay
from outlive.services.relay.lead import WakeLead
from outlive.workflows.runs import AttemptContext, RetryLater, WorkflowDeps, run_attempt
from tests.support import TenantHandle

ROUNDS = 25


class Rig:
    def __init__(self, sessions: Sessions, settings: Settings, tenant: TenantHandle) -> None:
        assert settings.redis_url is not None
        self.sessions = sessions
        self.settings = settings
        self.tenant_id = TenantId(tenant.id)
        self.queue = create_queue(settings.redis_url, RUNS_QUEUE)
        self.jobs = create_queue(settings.redis_url, JOBS_QUEUE)
        self.instances = SaqRunInstances(self.queue, settings)
        self.http = httpx.AsyncClient()
        self.relay = Relay(
            sessions,
            self.instances,
            SaqJobProducer(self.jobs, settings),
            RedisQueueMarker(self.queue.redis, timeout_s=1),
            batch=100,
            recheck_s=3600,
            default_runs_cap=10,
            default_jobs_cap=10,
            admission=NO_ADMISSION,
            lead=WakeLead(most_s=0.0, slots=32),  # off: handed back when due
        )

    def deps(self, *agents: Agent[Any]) -> WorkflowDeps:
        return WorkflowDeps(
            self.sessions,
            AgentRegistry(agents),
            self.http,
            self.settings,
            wake_lead=self.relay.lead,
        )

    async def wake(self) -> int:
        """One relay pass's wake of the timers due (with the relay's lead)."""
        return await self.relay._wake_due(self.relay.lead.seconds)

    async def start(self, agent: str = "demo") -> RunId:
        async with self.sessions.unit(self.tenant_id, single_statement=True) as uow:
            started = await runs_service.start_run(
                uow, agent=agent, params={}, instances=self.instances
            )
        assert started.created
        return started.run.id

    async def context(self, run_id: RunId) -> AttemptContext:
        async with self.sessions.unit(single_statement=True) as uow:
            run = await runs_service.claim_run(uow, run_id, lease_s=30)
        assert run is not None
        return AttemptContext(self.deps(), run)

    async def park(self, run_id: RunId, name: str, timeout: float | None) -> None:
        ctx = await self.context(run_id)
        with pytest.raises(RunParked):
            await ctx.wait_for(name, timeout=timeout)

    async def signal(self, run_id: RunId, name: str, payload: Any) -> bool:
        async with self.sessions.unit(self.tenant_id) as uow:
            result = await waits.signal_run(
                uow,
                run_id,
                name=name,
                payload=payload,
                idempotency_key=None,
                instances=self.instances,
            )
        return result.accepted

    async def cancel(self, run_id: RunId) -> runs_service.RunRecord:
        async with self.sessions.unit(self.tenant_id) as uow:
            return await runs_service.cancel_run(uow, run_id)

    async def finish(self, run_id: RunId) -> None:
        """Settle the round's run, whatever it is doing, so the next round can start one."""
        run = await self.cancel(run_id)
        if run.status == RunStatus.RUNNING:
            async with self.sessions.unit(self.tenant_id) as uow:
                await runs_service.settle_run(uow, run_id, RunStatus.CANCELLED, attempt=run.attempt)

    async def read(self, run_id: RunId) -> runs_service.RunRecord:
        run = await runs_service.read_run(self.sessions, self.tenant_id, run_id)
        assert run is not None
        return run

    async def events(self, run_id: RunId) -> list[runs_service.EventRecord]:
        return await runs_service.list_events(self.sessions, run_id, first=1000)

    async def one(self, sql: str, **params: Any) -> Any:
        async with self.sessions.unit() as uow:
            return await uow.one(text(sql), **params)


@pytest.fixture
async def rig(sessions: Sessions, settings: Settings, tenant: TenantHandle) -> AsyncIterator[Rig]:
    rig = Rig(sessions, settings, tenant)
    yield rig
    await rig.http.aclose()
    await rig.queue.disconnect()
    await rig.jobs.disconnect()


async def test_a_signal_racing_the_timeout_has_exactly_one_outcome(rig: Rig) -> None:
    outcomes: Counter[str] = Counter()
    for round in range(ROUNDS):
        run_id = await rig.start()
        await rig.park(run_id, "go", timeout=0.2)
        row = await rig.one(
            "SELECT extract(epoch FROM wake_at - now()) AS s FROM runs WHERE id = :r", r=run_id
        )
        await asyncio.sleep(max(0.0, float(row["s"])))  # the timer is due now

        async def send(run_id: RunId, round: int) -> bool:
            await asyncio.sleep(random.uniform(0, 0.01))  # jitter
            return await rig.signal(run_id, "go", {"round": round})

        _, accepted = await asyncio.gather(rig.wake(), send(run_id, round))
        assert accepted  # the run is active either way: the signal is kept
        events = await rig.events(run_id)
        resumed = [e.data for e in events if e.type == "resumed"]
        assert len(resumed) == 1, events
        wait = await rig.one(
            "SELECT resolved_by, payload FROM run_waits WHERE run_id = :r AND kind = 'signal'",
            r=run_id,
        )
        pending = await rig.one(
            "SELECT count(*) AS n FROM run_signals WHERE run_id = :r AND delivered_at IS NULL",
            r=run_id,
        )
        assert resumed[0]["by"] == wait["resolved_by"]
        if wait["resolved_by"] == "signal":
            assert wait["payload"] == {"round": round}
            assert pending["n"] == 0
        else:
            assert wait["resolved_by"] == "timeout"
            assert wait["payload"] is None
            assert pending["n"] == 1  # kept for the next wait of that name: never lost
        assert (await rig.read(run_id)).status == RunStatus.QUEUED
        outcomes[wait["resolved_by"]] += 1
        await rig.cancel(run_id)
    assert sum(outcomes.values()) == ROUNDS
    print(f"signal vs timeout over {ROUNDS} rounds: {dict(outcomes)}")  # noqa: T201


async def test_a_signal_racing_cancel_run_has_exactly_one_outcome(rig: Rig) -> None:
    outcomes: Counter[bool] = Counter()
    for _ in range(ROUNDS):
        run_id = await rig.start()
        await rig.park(run_id, "go", timeout=None)

        async def cancel(run_id: RunId) -> runs_service.RunRecord:
            await asyncio.sleep(random.uniform(0, 0.005))  # jitter
            return await rig.cancel(run_id)

        accepted, cancelled = await asyncio.gather(rig.signal(run_id, "go", 1), cancel(run_id))
        assert cancelled.status == RunStatus.CANCELLED  # WAITING or woken (QUEUED): at once
        events = await rig.events(run_id)
        names = [e.type for e in events]
        assert names[-1] == "cancelled"
        assert names.count("cancelled") == 1
        assert names.count("signal") == (1 if accepted else 0)
        assert names.count("resumed") == (1 if accepted else 0)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        outcomes[accepted] += 1
    print(f"signal vs cancelRun over {ROUNDS} rounds: accepted {dict(outcomes)}")  # noqa: T201


async def test_a_signal_racing_the_wait_being_registered_is_never_lost(rig: Rig) -> None:
    outcomes: Counter[str] = Counter()
    for round in range(ROUNDS):
        run_id = await rig.start()
        ctx = await rig.context(run_id)

        async def wait(ctx: AttemptContext) -> Any:
            try:
                return await ctx.wait_for("go", timeout=None)
            except RunParked:
                return "parked"

        got, accepted = await asyncio.gather(wait(ctx), rig.signal(run_id, "go", {"r": round}))
        assert accepted
        names = [e.type for e in await rig.events(run_id)]
        if got == "parked":  # registered first: the signal woke it
            assert names[-3:] == ["waiting", "signal", "resumed"]
            wait_row = await rig.one("SELECT payload FROM run_waits WHERE run_id = :r", r=run_id)
            assert wait_row["payload"] == {"r": round}
            outcomes["woken"] += 1
        else:  # the signal came first: taken from the mailbox, no wait at all
            assert got == {"r": round}
            assert "waiting" not in names
            outcomes["taken"] += 1
        pending = await rig.one(
            "SELECT count(*) AS n FROM run_signals WHERE run_id = :r AND delivered_at IS NULL",
            r=run_id,
        )
        assert pending["n"] == 0
        await rig.finish(run_id)
    print(f"signal vs wait over {ROUNDS} rounds: {dict(outcomes)}")  # noqa: T201


async def test_waits_are_keyed_by_name_and_occurrence_and_signals_are_first_in_first_out(
    rig: Rig,
) -> None:
    run_id = await rig.start()
    for n in (1, 2):
        assert await rig.signal(run_id, "b", {"b": n})
    ctx = await rig.context(run_id)
    with pytest.raises(RunParked):
        await ctx.wait_for("a", timeout=None)
    assert await rig.signal(run_id, "a", "A")  # wakes it
    ctx = await rig.context(run_id)  # the resumed attempt runs from the top
    assert ctx.attempt == 2
    assert await ctx.wait_for("a") == "A"  # satisfied: at once
    assert await ctx.wait_for("b") == {"b": 1}  # the mailbox, in order
    assert await ctx.wait_for("b") == {"b": 2}
    events = [e.type for e in await rig.events(run_id)]
    assert events.count("waiting") == 1


class _Input(BaseModel):
    pass


async def _waits_then_faults(ctx: RunContext, _: _Input) -> None:
    await ctx.wait_for("a")
    await ctx.wait_for("b")
    raise RetryableFault("a fault after two resumes")


class _Control:
    async def heartbeat(self) -> None:
        return None

    def is_shutting_down(self) -> bool:
        return False

    def give_back_attempt(self) -> None:
        return None

    def parked(self) -> None:
        return None


async def test_resuming_from_waiting_uses_up_none_of_the_three_attempts(rig: Rig) -> None:
    agent = Agent(name="demo", description="", input_model=_Input, run=_waits_then_faults)
    deps = rig.deps(agent)
    run_id = await rig.start()
    await run_attempt(deps, run_id, _Control())  # attempt 1 parks on "a"
    assert await rig.signal(run_id, "a", 1)
    await run_attempt(deps, run_id, _Control())  # attempt 2 gets past "a", parks on "b"
    assert await rig.signal(run_id, "b", 2)
    with pytest.raises(RetryLater):  # attempt 3 faults: its first retryable fault, retried
        await run_attempt(deps, run_id, _Control())
    run = await rig.read(run_id)
    assert (run.status, run.attempt, run.resumes) == (RunStatus.QUEUED, 3, 2)
    names = [e.type for e in await rig.events(run_id)]
    assert names[-1] == "retrying"
    assert names.count("claimed") == 3


async def test_a_short_sleep_stays_in_process_and_a_satisfied_long_one_is_skipped(
    rig: Rig,
) -> None:
    run_id = await rig.start()
    ctx = await rig.context(run_id)
    await ctx.sleep(0.05)  # at most DURABLE_SLEEP_MIN_S: in-process, the attempt goes on
    assert (await rig.read(run_id)).status == RunStatus.RUNNING
    with pytest.raises(RunParked):
        await ctx.sleep(1.2)  # the second sleep call: parks
    parked = await rig.read(run_id)
    assert parked.status == RunStatus.WAITING
    assert parked.waiting_for is None
    assert parked.wake_at is not None
    left = await rig.one(
        "SELECT extract(epoch FROM wake_at - now()) AS s FROM runs WHERE id = :r", r=run_id
    )
    await asyncio.sleep(max(0.0, float(left["s"])))
    assert await rig.wake() == 1
    ctx = await rig.context(run_id)  # resumed: runs from the top
    loop = asyncio.get_running_loop()
    began = loop.time()
    await ctx.sleep(0.05)  # again in-process (no record)
    await ctx.sleep(1.2)  # occurrence 2: satisfied, returns at once
    assert loop.time() - began < 1.0
    with pytest.raises(RunParked):  # a third sleep is a new one
        await ctx.sleep_until(parked.wake_at + timedelta(seconds=60))
    names = [e.type for e in await rig.events(run_id)]
    assert names.count("waiting") == 2
    assert [e.data for e in await rig.events(run_id) if e.type == "resumed"] == [{"by": "timer"}]
