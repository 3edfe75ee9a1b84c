"""Benchmark: `outlive replay`, per recorded run of 10 and of 1,000 steps (issue 43).

    uv run python bench/replay.py [--small 30] [--large 3] [--rounds 5]

In-process, against a fresh migrated database. The runs are recorded through Outlive's own
code (`AttemptContext`: each step a real journal commit) by an agent `chain` of N steps, each
returning a small dict through its return annotation. Then, per run, timed:

1. `read + replay`: what `outlive replay` spends on the run: its page read (the run, its steps,
   waits and children: four statements in a READ ONLY transaction, `services.runs.recorded`)
   and its replay offline (`workflows.replay`: every step answered from the journal and
   validated through the step function's annotation, under the network guard);
2. `replay`: the replay alone, in memory;
3. floor: a bare asyncpg `SELECT` of the run's journal rows.

Targets (issue 43): <= 20 ms per 10-step run, <= 200 ms per 1,000-step run (read + replay).
Needs PostgreSQL (BENCH_DATABASE_URL; default the local one) and Redis (BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Env, bench_env, table
from steps import NoInstances, claim

from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.raw import create_pool
from outlive.services.runs import start_run
from outlive.services.runs.recorded import Filters, read_recorded
from outlive.services.tenants import create_token
from outlive.workflows.offline import Guard
from outlive.workflows.replay import replay_runs
from outlive.workflows.runs import AttemptContext, WorkflowDeps

FLOOR = "SELECT name, occurrence, result::text FROM run_steps WHERE run_id = $1 ORDER BY seq"


class ChainInput(BaseModel):
    steps: int = 10


async def work(i: int) -> dict[str, Any]:
    return {"i": i, "reply": "a short model reply, about as long as a sentence", "ok": True}


async def chain(ctx: RunContext, params: ChainInput) -> dict[str, Any]:
    last: dict[str, Any] = {}
    for i in range(params.steps):
        last = await ctx.step("work", work, i)
    return {"last": last["i"]}


CHAIN = Agent("chain", "N steps", ChainInput, chain, version="bench")


async def record(sessions: Any, deps: WorkflowDeps, steps: int) -> tuple[str, Any]:
    """A run of `chain` with `steps` steps, recorded by a real attempt; (its tenant's slug, id)."""
    slug = f"bench-{secrets.token_hex(4)}"
    async with sessions.unit() as uow:
        principal, _ = await create_token(uow, tenant_slug=slug, email=f"o@{slug}.test")
    async with sessions.unit(principal.tenant.id) as uow:
        started = await start_run(
            uow, agent="chain", params={"steps": steps}, instances=NoInstances()
        )
    run_id = started.run.id
    run = await claim(sessions, run_id)
    await chain(AttemptContext(deps, run), ChainInput(steps=steps))  # type: ignore[arg-type]
    return slug, run_id


def ms(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


async def bench(env: Env, args: argparse.Namespace) -> None:
    settings = Settings(database_url=env.database_url, redis_url=env.redis_url)
    engine = create_engine(env.database_url)
    pool = await create_pool(env.database_url)
    sessions = create_sessions(engine, raw=pool)
    floor = await asyncpg.connect(env.database_url)
    registry = AgentRegistry([CHAIN])
    rows: list[list[object]] = []
    async with httpx.AsyncClient() as http:
        deps = WorkflowDeps(sessions=sessions, agents=registry, http=http, settings=settings)
        try:
            for size, count in ((10, args.small), (1000, args.large)):
                runs = [await record(sessions, deps, size) for _ in range(count)]
                full, alone, bare = [], [], []
                for _ in range(args.rounds):
                    for slug, run_id in runs:
                        started = time.perf_counter()
                        [recorded] = await read_recorded(sessions, Filters(tenant=slug, limit=1))
                        read = time.perf_counter()
                        [verdict] = await replay_runs([recorded], registry, settings, Guard())
                        done = time.perf_counter()
                        if verdict.kind != "compatible" or verdict.answered != size:
                            raise RuntimeError(f"replayed {verdict.answered}: {verdict.verdict}")
                        full.append((done - started) * 1000)
                        alone.append((done - read) * 1000)
                        started = time.perf_counter()
                        await floor.fetch(FLOOR, run_id)
                        bare.append((time.perf_counter() - started) * 1000)
                target = 20 if size == 10 else 200
                rows.append([f"{size} steps", len(full), ms(full), ms(alone), ms(bare), target])
        finally:
            await floor.close()
            await pool.close()
            await engine.dispose()
    header = ["run", "replays", "read+replay ms (p50)", "replay ms", "floor SELECT ms", "target"]
    print(table(rows, header))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--small", type=int, default=30, help="10-step runs recorded")
    parser.add_argument("--large", type=int, default=3, help="1,000-step runs recorded")
    parser.add_argument("--rounds", type=int, default=5, help="replays of each run")
    args = parser.parse_args()

    async def go() -> None:
        async with bench_env() as env:
            await bench(env, args)

    asyncio.run(go())


if __name__ == "__main__":
    main()
