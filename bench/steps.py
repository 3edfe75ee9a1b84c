"""Benchmark: durable steps (`ctx.step`), each part beside a floor measured in the same run.

    uv run python bench/steps.py [--steps 1000] [--commits 600] [--only commit,memo,resume,policy]

In-process, against a fresh migrated database, through Outlive's own code (`AttemptContext`,
the worker's single-statement units on the raw asyncpg pool), not a mock:

1. `commit`: the step commit on a first attempt: `await ctx.step(name, fn)` where `fn` returns a
   small dict at once, so the figure is the journal write (one statement: the journal row, its
   `step` event, the lease, fenced on the attempt). Floor: a bare asyncpg `INSERT` of the same
   journal row, on one connection of the same database, in the same run. Blocks of 50 alternate
   between the two. Target p50 <= 3 ms, p99 <= 15 ms.
2. `resume`: a run with `--steps` recorded steps is claimed again (a lost worker) and its
   attempt loads the journal: `AttemptContext.resume()`, counted in statements (must be 1) and
   timed over 20 resumes. Floor: the bare `SELECT` of the same rows with asyncpg. Target <= 100 ms.
3. `memo`: that resumed attempt runs the agent again: every one of the `--steps` steps is a memo
   hit, answered from memory (the statement count must stay 0). Per step, beside the floor of
   calling the same `fn` directly (no journal). Target <= 50 us per step.

4. `policy`: the step commit of 1. beside the same step declaring a policy and a named limit
   (`retry=Retry(attempts=5)`, `timeout=30`, `limit="llm"`, the limit taken from Redis with a
   global rate too high to wait on, and a tenant share), in alternating blocks of 50. The
   figure is what the policy and the limit add to the p50, beside the floor of one bare Redis
   round trip (a PING, in the same blocks): the limit is one `EVALSHA`. Target <= 1 ms.

The durable sleeps (10,000 sleeping runs: worker slots held, wake-up lateness beside a bare
due-row loop) are measured by `bench/waits.py`: they need a worker process and minutes, not a
microbenchmark's seconds.

Needs PostgreSQL (BENCH_DATABASE_URL; default the local one) and Redis (BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import asyncpg
import httpx
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Env, bench_env, table

from outlive.agents.policy import Retry
from outlive.agents.registry import AgentRegistry
from outlive.config import Rate, Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.raw import Statement, create_pool
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services.limits import NamedLimits
from outlive.services.runs import RunRecord, claim_run, start_run
from outlive.services.tenants import create_token
from outlive.workflows.runs import AttemptContext, WorkflowDeps

BLOCK = 50
FLOOR_INSERT = (
    "INSERT INTO run_steps (run_id, name, occurrence, seq, attempt, result)"
    " VALUES ($1, $2, 1, $3, 1, $4::jsonb)"
)
FLOOR_SELECT = "SELECT name, occurrence, result::text AS result FROM run_steps WHERE run_id = $1"


class Counting:
    """The sessions, counting the statements an attempt sends (to show "one query" and "no I/O
    on a memo hit")."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions
        self.statements = 0

    async def all(self, statement: Statement, /, **params: Any) -> Any:
        self.statements += 1
        return await self._sessions.all(statement, **params)

    async def one(self, statement: Statement, /, **params: Any) -> Any:
        self.statements += 1
        return await self._sessions.one(statement, **params)

    def unit(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self._sessions.unit(*args, **kwargs)


class NoInstances:
    async def start(self, run_id: RunId) -> None:
        return None

    async def resume(self, run_id: RunId) -> None:
        await self.start(run_id)

    async def states(self, run_ids: Any) -> list[Any]:
        return []

    async def redeliver(self, run_ids: Any) -> int:
        return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def result(i: int) -> dict[str, Any]:
    return {"i": i, "reply": "a short model reply, about as long as a sentence", "ok": True}


async def new_run(sessions: Sessions, agent: str) -> tuple[TenantId, RunId]:
    slug = f"bench-{secrets.token_hex(4)}"
    async with sessions.unit() as uow:
        principal, _ = await create_token(uow, tenant_slug=slug, email=f"o@{slug}.test")
    tenant_id = principal.tenant.id
    async with sessions.unit(tenant_id) as uow:
        started = await start_run(uow, agent=agent, params={}, instances=NoInstances())
    return tenant_id, started.run.id


async def claim(sessions: Sessions, run_id: RunId) -> RunRecord:
    """A new attempt of the run, taking it over as from a lost worker."""
    async with sessions.unit() as uow:
        await uow.execute(
            text("UPDATE runs SET lease_expires_at = now() - interval '1 s' WHERE id = :id"),
            id=run_id,
        )
    async with sessions.unit() as uow:
        run = await claim_run(uow, run_id, lease_s=60)
    if run is None:
        raise RuntimeError(f"run {run_id} could not be claimed")
    return run


async def bench(env: Env, args: argparse.Namespace) -> None:
    parts = set(args.only.split(","))
    steps: int = args.steps
    settings = Settings(database_url=env.database_url, redis_url=env.redis_url)
    engine = create_engine(env.database_url)
    pool = await create_pool(env.database_url)
    sessions = create_sessions(engine, raw=pool)
    floor = await asyncpg.connect(env.database_url)
    http = httpx.AsyncClient()
    counting = Counting(sessions)
    deps = WorkflowDeps(
        sessions=cast(Sessions, counting), agents=AgentRegistry([]), http=http, settings=settings
    )
    rows: list[list[object]] = []
    try:
        _, run_id = await new_run(sessions, "demo")
        run = await claim(sessions, run_id)
        ctx = AttemptContext(deps, run)

        def answer(i: int) -> dict[str, Any]:
            return result(i)

        if "commit" in parts:
            ours: list[float] = []
            bare: list[float] = []
            _, floor_run = await new_run(sessions, "demo")
            for block in range(args.commits // BLOCK):
                for k in range(BLOCK):
                    i = block * BLOCK + k
                    began = time.perf_counter()
                    await ctx.step(f"commit-{i}", answer, i)
                    ours.append(time.perf_counter() - began)
                for k in range(BLOCK):
                    i = block * BLOCK + k
                    payload = json.dumps(result(i))
                    began = time.perf_counter()
                    await floor.execute(FLOOR_INSERT, floor_run, f"floor-{i}", i + 1, payload)
                    bare.append(time.perf_counter() - began)
            rows.append(["step commit p50 (ms)", f"{statistics.median(ours) * 1e3:.2f}",
                         f"{statistics.median(bare) * 1e3:.2f}", "<= 3"])  # fmt: skip
            rows.append(["step commit p99 (ms)", f"{pct(ours, 0.99) * 1e3:.2f}",
                         f"{pct(bare, 0.99) * 1e3:.2f}", "<= 15"])  # fmt: skip

        if "policy" in parts:
            rows.extend(await bench_policy(env, sessions, deps, answer, args.commits))

        if parts & {"resume", "memo"}:
            _, big = await new_run(sessions, "demo")
            first = AttemptContext(deps, await claim(sessions, big))
            for i in range(steps):
                await first.step("turn", answer, i)
            loads: list[float] = []
            bare_loads: list[float] = []
            statements = []
            for _ in range(20):
                resumed = AttemptContext(deps, await claim(sessions, big))
                before = counting.statements
                began = time.perf_counter()
                await resumed.resume()
                loads.append(time.perf_counter() - began)
                statements.append(counting.statements - before)
                began = time.perf_counter()
                found = await floor.fetch(FLOOR_SELECT, big)
                bare_loads.append(time.perf_counter() - began)
                if len(found) != steps:
                    raise RuntimeError(f"the floor read {len(found)} steps, not {steps}")
            if "resume" in parts:
                if set(statements) != {1}:
                    raise RuntimeError(f"a resume took {statements} statements, not 1")
                rows.append([f"resume of {steps} steps, p50 (ms)",
                             f"{statistics.median(loads) * 1e3:.2f}",
                             f"{statistics.median(bare_loads) * 1e3:.2f}", "<= 100"])  # fmt: skip
                rows.append([f"resume of {steps} steps, max (ms)",
                             f"{max(loads) * 1e3:.2f}", f"{max(bare_loads) * 1e3:.2f}",
                             "statements: 1"])  # fmt: skip
            if "memo" in parts:
                hits: list[float] = []
                direct: list[float] = []

                async def replay(step: Callable[..., Any]) -> float:
                    began = time.perf_counter()
                    for i in range(steps):
                        await step(i)
                    return (time.perf_counter() - began) / steps

                for _ in range(5):
                    fresh = AttemptContext(deps, await claim(sessions, big))
                    await fresh.resume()
                    before = counting.statements
                    hits.append(await replay(lambda i, c=fresh: c.step("turn", answer, i)))
                    if counting.statements != before:
                        raise RuntimeError("a memo hit sent a statement")

                    async def plain(i: int) -> dict[str, Any]:
                        return answer(i)

                    direct.append(await replay(plain))
                rows.append(["memoized step (us)", f"{statistics.median(hits) * 1e6:.1f}",
                             f"{statistics.median(direct) * 1e6:.2f}", "<= 50"])  # fmt: skip
    finally:
        await http.aclose()
        await floor.close()
        await pool.close()
        await engine.dispose()
    print(table(rows, ["figure", "outlive", "floor", "target"]))


async def bench_policy(
    env: Env, sessions: Sessions, deps: WorkflowDeps, answer: Callable[[int], Any], commits: int
) -> list[list[object]]:
    """Part 4: the step commit with and without a policy and a named limit, alternating."""
    from redis.asyncio import Redis

    redis = Redis.from_url(env.redis_url)
    limited = Settings(
        database_url=env.database_url, redis_url=env.redis_url, limit_llm=Rate(10**9, 1)
    )
    policy_deps = WorkflowDeps(
        sessions=deps.sessions,
        agents=deps.agents,
        http=deps.http,
        settings=limited,
        limits=NamedLimits(redis, sessions, limited),
    )
    plain_ctx = AttemptContext(deps, await claim(sessions, (await new_run(sessions, "a"))[1]))
    retry_ctx = AttemptContext(deps, await claim(sessions, (await new_run(sessions, "c"))[1]))
    policy_ctx = AttemptContext(
        policy_deps, await claim(sessions, (await new_run(sessions, "b"))[1])
    )
    retry = Retry(attempts=5, backoff=1.0, max_backoff=60)
    plain: list[float] = []
    retried: list[float] = []
    with_policy: list[float] = []
    pings: list[float] = []
    try:
        for block in range(commits // BLOCK):
            for k in range(BLOCK):
                i = block * BLOCK + k
                began = time.perf_counter()
                await plain_ctx.step(f"plain-{i}", answer, i)
                plain.append(time.perf_counter() - began)
            for k in range(BLOCK):
                i = block * BLOCK + k
                began = time.perf_counter()
                await retry_ctx.step(f"retry-{i}", answer, i, retry=retry, timeout=30)
                retried.append(time.perf_counter() - began)
            for k in range(BLOCK):
                i = block * BLOCK + k
                began = time.perf_counter()
                await policy_ctx.step(
                    f"policy-{i}", answer, i, retry=retry, timeout=30, limit="llm"
                )
                with_policy.append(time.perf_counter() - began)
                began = time.perf_counter()
                await redis.ping()  # type: ignore[misc]  # redis-py's union return type
                pings.append(time.perf_counter() - began)
    finally:
        await redis.aclose()
    base = statistics.median(plain)
    return [
        [
            "step commit with policy + limit, p50 (ms)",
            f"{statistics.median(with_policy) * 1e3:.2f}",
            f"{base * 1e3:.2f}",
            "",
        ],
        [
            "added by the policy alone, p50 (ms)",
            f"{(statistics.median(retried) - base) * 1e3:.2f}",
            "0",
            "",
        ],
        [
            "added by policy + limit, p50 (ms)",
            f"{(statistics.median(with_policy) - base) * 1e3:.2f}",
            f"{statistics.median(pings) * 1e3:.2f} (a bare Redis PING)",
            "<= 1",
        ],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps of the resumed run")
    parser.add_argument("--commits", type=int, default=600, help="step commits timed")
    parser.add_argument(
        "--only", default="commit,memo,resume,policy", help="parts, comma-separated"
    )
    args = parser.parse_args()

    async def go() -> None:
        async with bench_env() as env:
            await bench(env, args)

    asyncio.run(go())


if __name__ == "__main__":
    main()
