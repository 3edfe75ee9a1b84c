"""Durable steps (`ctx.step`): a recorded step is never executed again by a later attempt of the
run; its result comes back instead, keyed by (name, occurrence), so retries, lost attempts,
`asyncio.gather` and a deploy that inserts a step all resume where the run stopped. A zombie
attempt records nothing; a result over 16 MiB fails the run naming the step; `Run.steps`."""

from __future__ import annotations

import asyncio
import gc
import random
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from pydantic import BaseModel
from sqlalchemy import text

from outlive.agents.demo import DemoInput, play_turn
from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import PendingNudge, Sessions
from outlive.errors import RetryableFault, RunSuperseded
from outlive.ids import RunId
from outlive.services import runs as runs_service
from outlive.services.runs import RunRecord, claim_run, load_journal
from outlive.workflows.runs import AttemptContext, WorkflowDeps
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, NudgeWatch, Servers, TenantHandle, settled
from tests.workflows.test_claim import expire_lease, read
from tests.workflows.test_lease import deliver, start, timeline

ROUNDS = 12  # of 3 gathered steps, in the gather test
Calls = Counter[tuple[str, int]]  # (step, occurrence or argument) -> times its fn ran


class Plan(BaseModel):
    steps: list[str]
    budget: int


def registry(run: Callable[[RunContext, DemoInput], Any]) -> AgentRegistry:
    """An agent named `demo` (so `start` can start it) running `run`."""
    return AgentRegistry([Agent("demo", "a test agent", DemoInput, run)])


@pytest.fixture
async def deps_for(
    servers: Servers, sessions: Sessions
) -> AsyncIterator[Callable[[AgentRegistry], WorkflowDeps]]:
    """Deps running the given agents, with a lease long enough that nothing expires by itself."""
    settings = make_settings(servers, run_heartbeat_s=30, run_retry_delay_s=0.01)
    async with httpx.AsyncClient() as http:
        yield lambda agents: WorkflowDeps(
            sessions=sessions, agents=agents, http=http, settings=settings
        )


def memo_hits() -> float:
    return REGISTRY.get_sample_value("outlive_step_memo_hits_total", {"agent": "demo"}) or 0.0


def steps_recorded() -> float:
    return REGISTRY.get_sample_value("outlive_steps_recorded_total", {"agent": "demo"}) or 0.0


async def journal_rows(sessions: Sessions, run_id: RunId) -> list[tuple[str, int, int, int]]:
    """(name, occurrence, seq, attempt) of every recorded step, in completion order."""
    rows = await sessions.all(
        text(
            "SELECT name, occurrence, seq, attempt FROM run_steps WHERE run_id = :id ORDER BY seq"
        ),
        id=run_id,
    )
    return [(r["name"], r["occurrence"], r["seq"], r["attempt"]) for r in rows]


async def test_a_retryable_fault_at_step_4_does_not_call_steps_1_to_3_again(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    calls: Calls = Counter()

    async def work(ctx: RunContext, i: int) -> int:
        calls[("work", i)] += 1
        await ctx.emit("note", {"i": i})  # written with its step, once
        if i == 4 and ctx.attempt == 1:
            raise RetryableFault("step 4 fails on attempt 1")
        return i * 10

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        return {"results": [await ctx.step("work", work, ctx, i) for i in range(1, 7)]}

    deps = deps_for(registry(agent))
    run_id = await start(sessions, tenant, {})
    hits, recorded = memo_hits(), steps_recorded()
    assert await deliver(deps, run_id) == "retry"
    assert await deliver(deps, run_id) == "done"
    assert (memo_hits() - hits, steps_recorded() - recorded) == (3, 6)
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"results": [10, 20, 30, 40, 50, 60]}
    assert calls == {("work", 1): 1, ("work", 2): 1, ("work", 3): 1, ("work", 4): 2,
                     ("work", 5): 1, ("work", 6): 1}  # fmt: skip
    assert await journal_rows(sessions, run_id) == [
        ("work", i, i, 1 if i <= 3 else 2) for i in range(1, 7)
    ]
    events = await runs_service.list_events(sessions, run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    notes = [e.data["i"] for e in events if e.type == "note"]
    assert notes == [1, 2, 3, 4, 5, 6]  # step 4's note from attempt 1 was never written
    steps = [e.data for e in events if e.type == "step"]
    assert steps == [{"name": "work", "occurrence": i} for i in range(1, 7)]
    kinds = [e.type for e in events]
    assert kinds[: kinds.index("retrying")] == ["claimed"] + ["note", "step"] * 3


async def test_a_deploy_that_inserts_a_step_mid_run_finishes_it_with_old_steps_memoized(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    calls: Calls = Counter()

    async def fetch() -> dict[str, Any]:
        calls[("fetch", 1)] += 1
        return {"pages": 3}

    async def plan(pages: int) -> Plan:
        calls[("plan", 1)] += 1
        return Plan(steps=[f"page {i}" for i in range(pages)], budget=7)

    async def validate(p: Plan) -> bool:
        calls[("validate", 1)] += 1
        return p.budget > 0

    def write(p: Plan) -> str:  # a plain function is a step too
        calls[("write", 1)] += 1
        return f"wrote {len(p.steps)} pages"

    async def v1(ctx: RunContext, params: DemoInput) -> Any:
        fetched = await ctx.step("fetch", fetch)
        await ctx.step("plan", plan, fetched["pages"])
        raise RetryableFault("v1 stops here; v2 is deployed before the next attempt")

    async def v2(ctx: RunContext, params: DemoInput) -> Any:
        fetched = await ctx.step("fetch", fetch)
        ok = await ctx.step("validate", validate, Plan(steps=[], budget=1))  # new in v2
        planned = await ctx.step("plan", plan, fetched["pages"])
        assert isinstance(planned, Plan)  # the recorded model comes back as the model
        return {
            "ok": ok,
            "plan": planned.model_dump(),
            "wrote": await ctx.step("write", write, planned),
        }

    run_id = await start(sessions, tenant, {})
    assert await deliver(deps_for(registry(v1)), run_id) == "retry"
    assert await deliver(deps_for(registry(v2)), run_id) == "done"
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {
        "ok": True,
        "plan": {"steps": ["page 0", "page 1", "page 2"], "budget": 7},
        "wrote": "wrote 3 pages",
    }
    assert calls == {("fetch", 1): 1, ("plan", 1): 1, ("validate", 1): 1, ("write", 1): 1}
    assert [(n, a) for n, _, _, a in await journal_rows(sessions, run_id)] == [
        ("fetch", 1),
        ("plan", 1),
        ("validate", 2),
        ("write", 2),
    ]


async def take_over(sessions: Sessions, run_id: RunId, *, expire: bool) -> RunRecord:
    """Claim the run as the next attempt would, once the last one's worker is gone. A commit the
    cancelled attempt sent just before it was cancelled may still land first and extend its
    lease (it was alive when it committed): then its lease is expired again. A commit that
    lands after this claim is fenced off by the attempt number."""
    for _ in range(5):
        if expire:
            await expire_lease(sessions, run_id)
        async with sessions.unit() as uow:
            run = await claim_run(uow, run_id, lease_s=30)
        if run is not None:
            return run
        expire = True
    raise AssertionError(f"run {run_id} could not be taken over")


async def test_gathered_steps_cancelled_before_they_start_leave_no_coroutine_unawaited(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    """An attempt cancelled between its gather's call and the gathered steps' start (a crash
    test hit that window): each step is one coroutine until it starts, so none of the inner
    ones was made and left never awaited (a warning, an error under this suite's filters)."""

    async def noop() -> int:
        return 1

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        return await asyncio.gather(ctx.step("a", noop), ctx.step("b", noop))

    deps = deps_for(registry(agent))
    run_id = await start(sessions, tenant, {})
    ctx = AttemptContext(deps, await take_over(sessions, run_id, expire=False))
    await ctx.resume()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        attempt = asyncio.create_task(agent(ctx, DemoInput()))
        await asyncio.sleep(0)  # the agent ran up to its gather: both steps' tasks made, not run
        attempt.cancel()
        await asyncio.gather(attempt, return_exceptions=True)
        del attempt
        gc.collect()
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert unawaited == []
    assert await journal_rows(sessions, run_id) == []


async def test_gathered_steps_crashed_and_resumed_20_times_never_run_again_once_recorded(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    executions: list[tuple[str, int, int]] = []  # (name, argument, attempt) of each completed fn
    rng = random.Random(18)
    commits = 0
    enough = asyncio.Event()
    target = 0

    async def count_commits(nudges: Sequence[PendingNudge]) -> None:
        nonlocal commits
        commits += sum(n.type == "run.event" for n in nudges)
        if commits >= target:
            enough.set()

    async def pick(ctx: RunContext, name: str, arg: int) -> list[Any]:
        await asyncio.sleep(rng.uniform(0, 0.004))  # completion order differs from call order
        executions.append((name, arg, ctx.attempt))
        return [name, arg]

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        rounds = []
        for r in range(ROUNDS):
            rounds.append(
                await asyncio.gather(
                    ctx.step("x", pick, ctx, "x", 2 * r),
                    ctx.step("x", pick, ctx, "x", 2 * r + 1),
                    ctx.step("y", pick, ctx, "y", r),
                )
            )
        return rounds

    deps = deps_for(registry(agent))
    deps.sessions = sessions.wired(nudge_sink=count_commits)
    run_id = await start(sessions, tenant, {})
    for crash in range(21):
        run = await take_over(sessions, run_id, expire=crash > 0)
        ctx = AttemptContext(deps, run)
        await ctx.resume()
        commits, target = 0, rng.randint(1, 2)
        enough.clear()
        attempt = asyncio.create_task(agent(ctx, DemoInput()))
        if crash < 20:  # crash it once it recorded a step or two: mid-step, mid-commit, between
            waiting = asyncio.create_task(enough.wait())
            await asyncio.wait({attempt, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            await asyncio.sleep(rng.uniform(0, 0.003))
            attempt.cancel()
            await asyncio.gather(attempt, return_exceptions=True)
    output = await attempt
    # every gathered call got its own result back, in the place it was called from
    assert output == [[["x", 2 * r], ["x", 2 * r + 1], ["y", r]] for r in range(ROUNDS)]
    recorded = {(n, o): a for n, o, _, a in await journal_rows(sessions, run_id)}
    assert len(recorded) == 3 * ROUNDS
    by_step = {("x", arg + 1): arg for arg in range(2 * ROUNDS)}
    by_step |= {("y", r + 1): r for r in range(ROUNDS)}
    for (name, occurrence), recorded_by in recorded.items():
        arg = by_step[(name, occurrence)]
        ran_in = [a for n, g, a in executions if (n, g) == (name, arg)]
        # never executed by an attempt after the one that recorded it
        assert max(ran_in) == recorded_by, (name, occurrence, ran_in, recorded_by)
    assert run.attempt == 21
    assert len(set(recorded.values())) >= 5  # the journal really was built across crashes
    events = await runs_service.list_events(sessions, run_id)
    assert sum(e.type == "step" for e in events) == 3 * ROUNDS
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_zombie_attempt_records_nothing_and_stops(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    ran: list[str] = []

    async def work(ctx: RunContext, name: str) -> str:
        ran.append(name)
        await ctx.emit("note", {"by": name})
        return name

    deps = deps_for(registry(lambda ctx, params: None))
    run_id = await start(sessions, tenant, {})
    async with sessions.unit() as uow:
        first = await claim_run(uow, run_id, lease_s=30)
    assert first is not None
    zombie = AttemptContext(deps, first)
    assert await zombie.step("one", work, zombie, "one") == "one"
    await expire_lease(sessions, run_id)  # attempt 1 stalls past its lease; attempt 2 takes over
    async with sessions.unit() as uow:
        assert await claim_run(uow, run_id, lease_s=30) is not None
    with pytest.raises(RunSuperseded):
        await zombie.step("two", work, zombie, "two")
    assert ran == ["one"]  # the step's gate found it superseded: its fn never ran
    assert [(n, a) for n, _, _, a in await journal_rows(sessions, run_id)] == [("one", 1)]
    assert (await load_journal(sessions, run_id))[0] == {("one", 1): '"one"'}
    assert [(t, d) for t, d in await timeline(sessions, run_id) if t in ("note", "step")] == [
        ("note", {"by": "one"}),
        ("step", {"name": "one", "occurrence": 1}),
    ]


async def test_a_zombie_whose_step_was_running_records_nothing(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    """Taken over while its step runs (past the gate): the step's commit is fenced."""
    running, taken = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def slow(ctx: RunContext, name: str) -> str:
        ran.append(name)
        await ctx.emit("note", {"by": name})
        running.set()
        await taken.wait()
        return name

    deps = deps_for(registry(lambda ctx, params: None))
    run_id = await start(sessions, tenant, {})
    async with sessions.unit() as uow:
        first = await claim_run(uow, run_id, lease_s=30)
    assert first is not None
    zombie = AttemptContext(deps, first)
    stepping = asyncio.ensure_future(zombie.step("two", slow, zombie, "two"))
    await running.wait()  # the step is past its gate and running
    await expire_lease(sessions, run_id)
    async with sessions.unit() as uow:
        assert await claim_run(uow, run_id, lease_s=30) is not None
    taken.set()
    with pytest.raises(RunSuperseded):
        await stepping
    assert ran == ["two"]  # its fn ran, but nothing of it was recorded
    assert await journal_rows(sessions, run_id) == []
    assert [t for t, _ in await timeline(sessions, run_id) if t in ("note", "step")] == []


async def test_a_result_over_16_mib_fails_the_run_naming_the_step_and_records_nothing(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    def small() -> str:
        return "s" * (16 * 1024 * 1024 - 2)  # exactly 16 MiB of JSON with its quotes: recorded

    def big() -> str:
        return "x" * (16 * 1024 * 1024)

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        await ctx.step("small enough", small)
        return await ctx.step("fetch the whole page", big)

    run_id = await start(sessions, tenant, {})
    assert await deliver(deps_for(registry(agent)), run_id) == "done"
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.FAILED
    assert run.attempt == 1  # not retried: the same code would return the same value
    assert run.error is not None
    assert run.error.startswith("StepTooLarge: step 'fetch the whole page' (occurrence 1)")
    assert "limited to 16777216 bytes" in run.error
    assert [n for n, *_ in await journal_rows(sessions, run_id)] == ["small enough"]


async def test_the_demo_resumes_at_its_first_unfinished_turn(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    demo = AgentRegistry.from_entry_points()
    deps = deps_for(demo)
    run_id = await start(sessions, tenant, {"turns": 4, "delayMs": 0})
    async with sessions.unit() as uow:  # attempt 1 plays two turns, then its worker dies
        first = await claim_run(uow, run_id, lease_s=30)
    assert first is not None
    ctx = AttemptContext(deps, first)
    for turn in (1, 2):
        await ctx.step("turn", play_turn, ctx, DemoInput(turns=4, delayMs=0), turn)
    await expire_lease(sessions, run_id)
    assert await deliver(deps, run_id) == "done"
    run = await read(sessions, tenant, run_id)
    assert (run.status, run.attempt, run.output) == (RunStatus.SUCCEEDED, 2, {"turns": 4})
    events = await timeline(sessions, run_id)
    assert [d["turn"] for t, d in events if t == "turn"] == [1, 2, 3, 4]
    assert [a for *_, a in await journal_rows(sessions, run_id)] == [1, 1, 2, 2]


STEPS = """query($id: ID!, $after: Int, $first: Int) { run(id: $id) {
  steps { seq name occurrence attempt completedAt }
  page: steps(after: $after, first: $first) { seq occurrence result } } }"""


@pytest.mark.usefixtures("worker")
async def test_run_steps_over_graphql_tenant_scoped_and_paged(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
) -> None:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "demo", {"turns": 5, "delayMs": 0})
        run_id = started["run"]["id"]
        await watch.until(run_id, settled)
    data = await api.gql(STEPS, {"id": run_id, "after": 2, "first": 2}, token=tenant.token)
    steps = data["run"]["steps"]
    assert [(s["seq"], s["name"], s["occurrence"], s["attempt"]) for s in steps] == [
        (i, "turn", i, 1) for i in range(1, 6)
    ]
    assert all(s["completedAt"] for s in steps)
    assert sorted(s["completedAt"] for s in steps) == [s["completedAt"] for s in steps]
    # `result`: what each step returned, from the journal (the demo's turn returns its number)
    assert data["run"]["page"] == [
        {"seq": 3, "occurrence": 3, "result": 3},
        {"seq": 4, "occurrence": 4, "result": 4},
    ]
    other = await api.gql(STEPS, {"id": run_id}, token=other_tenant.token)
    assert other == {"run": None}
    for first in (-1, 1001):
        with pytest.raises(GraphQLError) as bad:
            await api.gql(STEPS, {"id": run_id, "first": first}, token=tenant.token)
        assert bad.value.codes == ["BAD_USER_INPUT"]


async def test_a_result_that_is_not_json_fails_the_run_naming_the_step(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    ran: list[str] = []

    def opaque() -> Any:
        ran.append("opaque")
        return object()

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        return await ctx.step("opaque handle", opaque)

    run_id = await start(sessions, tenant, {})
    assert await deliver(deps_for(registry(agent)), run_id) == "done"
    run = await read(sessions, tenant, run_id)
    assert (run.status, run.attempt) == (RunStatus.FAILED, 1)
    assert (run.error or "").startswith(
        "StepResultInvalid: step 'opaque handle' (occurrence 1) returned a value that is not JSON"
    )
    assert ran == ["opaque"]
    assert await journal_rows(sessions, run_id) == []


async def test_a_durable_sleep_inside_a_step_fails_the_run_and_parks_nothing(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    """A step that parked would never be recorded, and its code before the sleep would run
    again on every resume: a durable sleep (or wait) goes between steps, and one inside a step
    is the agent's bug, said at once."""

    async def nap(ctx: RunContext) -> int:
        await ctx.sleep(60)
        return 1

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        return await ctx.step("nap", nap, ctx)

    run_id = await start(sessions, tenant, {})
    assert await deliver(deps_for(registry(agent)), run_id) == "done"
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert "inside a step" in run.error
    assert run.wake_at is None
    assert await journal_rows(sessions, run_id) == []
