"""Benchmark: the noisy neighbour. A quiet tenant's runs while another tenant floods the queue.

    uv run python bench/fairness.py [--quick] [--flood N] [--schedules N] [--schedule-jitter S]

One `outlive api` and 2 `outlive worker --concurrency 32` processes, agent `demo`: the flood's
runs each have a key of their own (`flood-<i>`, one conversation each), since a key has at most
one active run (`--many-agents`: one run of each of 5,000 copies of `demo`, the shape before
2026-12-06, whose agents' metrics every full collection walked: docs/measurements.md).
A quiet tenant starts one `demo` run (1 turn, 0 delay) through the API every 200 ms; the noisy
tenant floods 5,000 runs (one per key, 1 turn of `--noisy-delay-ms`, 100 by default: an
agent's turn mostly waits on I/O, such as a model's answer; 0 makes the flood pure CPU), written
at once and admitted by the dispatch function (so the flood is in the queue, not in the API).
The quiet tenant's first runs warm the processes up and are not counted. Six phases:

1. quiet alone: the quiet tenant's start-to-claim (its `claimed` event minus `createdAt`);
2. noisy alone: the flood's throughput (runs from its first claim to its last settle, per s);
3. both, with the default cap (10 runs of a tenant in flight): the quiet tenant's start-to-claim
   during the flood, and the flood's throughput;
4. both, the noisy tenant's flood reserving 10 tokens a run against a tenant budget of half of
   it (issue 42): half its runs pile up held WAITING `budget`, and the quiet tenant's p99 must
   stay within the same 2x;
5. both, with the noisy tenant's cap lifted (`outlive tenant set-limits --max-running-runs
   100000`): what arrival order alone gives, for comparison;
6. both, the cap back at 10, while 5,000 schedules of the noisy tenant (`--schedules`) all fire
   at the same minute (issue 44: a tenant cannot flood the clock): the quiet tenant's p99 within
   the same 2x, and how late the scheduled runs started (bench/_fairness_schedules.py).

Targets: in phase 3 the quiet tenant's p99 at most 2x its idle p99 (phase 1), and the noisy
tenant's throughput at least 80% of phase 2's.

The flood's turns all last `--noisy-delay-ms` unless `--noisy-jitter-ms J` spreads them over
the delay +/- J. Identical turns under a cap can move in lockstep (10 runs end together and the
next 10 are admitted together; one worker showed 9-10 claims in one 10 ms window, then 120 ms of
none): the second table's last column says how much, the median count of the flood's other
claims within 10 ms of each. The processes are measured warm: phase 1 starts once each worker
has logged `worker warm`.

Needs PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL; default the local ones).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fairness_schedules as schedules
from _common import Env, KeepAlive, bench_env, free_port, outlive, wait_http
from _fairness_probe import Lag, in_waves, pct, segments, warm
from _fairness_report import Phase, breakdown, report
from runs import START, make_tenants

from outlive.config import Settings
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.jobs.run_instances import SaqRunInstances

QUIET_EVERY_S = 0.2
QUIET_ALONE_S = 60.0  # 300 runs: p99 is not the largest of a few
WARM_UP_RUNS = 10  # the quiet tenant's first runs on fresh processes, before phase 1 counts
CAP = ("--max-running-runs",)
# The flood's runs: one key each of `demo`, or one agent each when `--many-agents` loads them.
MANY = "tests.many_agents:AGENTS"
AGENT_MODULES: dict[str, str] = {}

PER_TURN = {"inputTokens": 6, "outputTokens": 4}  # phase 4's flood: 10 tokens a run
SET_BUDGET = """mutation($l: Int!) { setBudget(input: {scope: TENANT, period: DAY,
    limitTokens: $l}) { id } }"""
DELETE_BUDGET = "mutation($id: ID!) { deleteBudget(id: $id) }"


class Tenant:
    def __init__(self, tenant_id: uuid.UUID, token: str, client: KeepAlive) -> None:
        self.id, self.token, self.client = tenant_id, token, client

    async def start(self, agent: str) -> None:
        run = {"agent": agent, "input": {"turns": 1, "delayMs": 0}}
        await self.gql(START, {"input": run})

    async def gql(self, query: str, variables: dict[str, object]) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables}).encode()
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            status, payload = await self.client.post_json("/graphql", body, headers)
        except (asyncio.IncompleteReadError, ConnectionError):  # an idle connection was closed
            await self.client.close()
            status, payload = await self.client.post_json("/graphql", body, headers)
        answer = json.loads(payload)
        if status != 200 or answer.get("errors"):
            raise RuntimeError(payload)
        data: dict[str, Any] = answer["data"]
        return data


async def quiet_runs(quiet: Tenant, until: asyncio.Event) -> None:
    """One demo run every 200 ms until `until` is set (a run still active is handed back)."""
    while not until.is_set():
        began = time.monotonic()
        await quiet.start("demo")
        await asyncio.sleep(max(0.0, QUIET_EVERY_S - (time.monotonic() - began)))  # the pace


async def flood(
    conn: asyncpg.Connection,
    env: Env,
    noisy: uuid.UUID,
    count: int,
    delay_ms: int = 0,
    usage: dict[str, int] | None = None,
    jitter_ms: int = 0,
) -> None:
    """The noisy tenant's `count` runs, written waiting in one statement, then admitted by the
    same dispatch function the API calls (the rest is admitted by the workers' settles). Written
    directly, so that the flood is in the queue, not in the API's event loop."""
    await conn.execute(
        """INSERT INTO runs (tenant_id, agent, key, input)
           SELECT $1, CASE WHEN $5 THEN 'many-' || i ELSE 'demo' END,
                  CASE WHEN $5 THEN '' ELSE 'flood-' || i END,
                  jsonb_strip_nulls(jsonb_build_object(
                      'turns', 1,
                      'delayMs', $3::int - $6::int + floor(random() * (2 * $6 + 1))::int,
                      'usagePerTurn', $4::jsonb))
             FROM generate_series(0, $2 - 1) i""",
        noisy,
        count,
        delay_ms,
        None if usage is None else json.dumps(usage),
        bool(AGENT_MODULES),
        jitter_ms,
    )
    queue = create_queue(env.redis_url, RUNS_QUEUE)
    instances = SaqRunInstances(
        queue, Settings(database_url=env.database_url, redis_url=env.redis_url, queue_timeout_s=60)
    )
    admitted = await conn.fetch("SELECT outlive_dispatch_runs($1, 10) AS id", noisy)
    await asyncio.gather(*(instances.start(r["id"]) for r in admitted))
    await queue.disconnect()


async def settled(conn: asyncpg.Connection, tenant: uuid.UUID, held_too: bool = False) -> None:
    """Every run of the tenant settled, or held WAITING by its budget (`held_too`: those too,
    once it is deleted)."""
    active = ["QUEUED", "RUNNING", *(["WAITING"] if held_too else [])]
    while await conn.fetchval(
        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = ANY($2::text[])",
        tenant,
        active,
    ):
        await asyncio.sleep(0.1)  # a poll of the database: the benchmark has no socket


async def start_to_claim_ms(
    conn: asyncpg.Connection, tenant: uuid.UUID, since: float
) -> list[float]:
    rows = await conn.fetch(
        """SELECT extract(epoch FROM min(e.at) - r.created_at) * 1000 AS ms
             FROM runs r JOIN run_events e ON e.run_id = r.id AND e.type = 'claimed'
            WHERE r.tenant_id = $1 AND r.created_at >= to_timestamp($2) GROUP BY r.id
            ORDER BY r.created_at""",
        tenant,
        since,
    )
    return [float(r["ms"]) for r in rows]


async def throughput(conn: asyncpg.Connection, tenant: uuid.UUID, since: float) -> float:
    first, last, count = await conn.fetchrow(
        """SELECT min(started_at), max(finished_at), count(*) FROM runs
            WHERE tenant_id = $1 AND created_at >= to_timestamp($2)""",
        tenant,
        since,
    )
    return float(count / (last - first).total_seconds())


async def phase(
    conn: asyncpg.Connection,
    env: Env,
    name: str,
    quiet: Tenant | None,
    noisy: uuid.UUID | None,
    flood_n: int,
    noisy_delay_ms: int = 0,
    lag: Lag | None = None,
    usage: dict[str, int] | None = None,
    scheduled: tuple[datetime, int] | None = None,
    jitter_ms: int = 0,
) -> Phase:
    """The quiet tenant's runs while the noisy tenant's load runs: a flood of `flood_n` runs,
    or, with `scheduled` (occurrence, count), that occurrence of its schedules firing."""
    if lag is not None:
        await lag.since_last()
    since = time.time()
    stop = asyncio.Event()
    quieting = asyncio.create_task(quiet_runs(quiet, stop)) if quiet else None
    if noisy is not None:
        if scheduled is not None:
            await schedules.fired(conn, noisy, *scheduled)
        else:
            await flood(conn, env, noisy, flood_n, noisy_delay_ms, usage, jitter_ms)
        await settled(conn, noisy)  # settled, or held WAITING by its budget
    else:
        await asyncio.sleep(QUIET_ALONE_S)  # the quiet tenant alone, for as long
    stop.set()
    if quieting is not None:
        await quieting
        await settled(conn, quiet.id)  # type: ignore[union-attr]
    return Phase(
        name,
        await start_to_claim_ms(conn, quiet.id, since) if quiet else [],
        await throughput(conn, noisy, since) if noisy and usage is None else None,
        await segments(conn, env.redis_url, quiet.id, since) if quiet else None,
        await lag.since_last() if lag is not None else (None, None, 0.0),
        lag.gc2 if lag is not None else (0.0, 0.0),
        await in_waves(conn, noisy, since) if noisy and scheduled is None else None,
    )


async def scheduled_phase(
    conn: asyncpg.Connection, env: Env, quiet: Tenant, noisy: uuid.UUID, args: Any, lag: Lag
) -> tuple[Phase, list[float]]:
    """Phase 6: one minute's occurrence of the noisy tenant's `args.schedules` schedules fires
    (capped at the default 10), the quiet tenant's runs starting 2 s before it. The phase, and
    each scheduled run's start minus its fire time (ms)."""
    count, delay = args.schedules, args.noisy_delay_ms
    first = await schedules.seed(conn, noisy, count, delay, args.schedule_jitter)
    await schedules.until(conn, first - timedelta(seconds=2))
    name = f"6. both, {count:,} schedules of noisy firing"
    done = await phase(conn, env, name, quiet, noisy, 0, delay, lag, scheduled=(first, count))
    return done, await schedules.lateness_ms(conn, noisy, first)


async def warm_up(conn: asyncpg.Connection, quiet: Tenant) -> list[float]:
    """A few quiet runs before phase 1: a fresh process's first request pays for imports, the
    document cache and prepared statements (15 ms, against 3-4 ms after), and phase 1's p99
    was the largest of its 75 runs (15 s then): one slow run, the cold first one or another,
    set the idle figure.
    Their start-to-claim (ms), in order."""
    since = time.time()
    for _ in range(WARM_UP_RUNS):
        await quiet.start("demo")
        await settled(conn, quiet.id)
    return await start_to_claim_ms(conn, quiet.id, since)


def set_cap(env: Env, slug: str, cap: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "outlive.cli", "tenant", "set-limits", "--tenant", slug, *CAP, cap],
        env={**os.environ, **env.vars(**AGENT_MODULES)},
        capture_output=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(done.stderr.decode())


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a flood of 1,000")
    parser.add_argument("--flood", type=int, default=5000)
    parser.add_argument(
        "--noisy-delay-ms",
        type=int,
        default=100,
        help="each flood run's turn waits this long (I/O, as an agent's call to a model does);"
        " 0 makes the flood pure CPU",
    )
    parser.add_argument(
        "--noisy-jitter-ms",
        type=int,
        default=0,
        help="each flood run's turn waits the delay plus or minus up to this much, uniformly"
        " (0: every run's the same, and the capped flood moves in lockstep waves)",
    )
    parser.add_argument(
        "--many-agents",
        action="store_true",
        help="flood with one run of each of 5,000 copies of demo (the shape before 2026-12-06)",
    )
    parser.add_argument(
        "--schedules",
        type=int,
        default=5000,
        help="phase 6: this many schedules of the noisy tenant fire at once (0: no phase 6)",
    )
    parser.add_argument(
        "--schedule-jitter", type=int, default=0, help="phase 6's schedules' jitter (s)"
    )
    return parser.parse_args()


async def main() -> None:
    args = arguments()
    if args.many_agents:
        AGENT_MODULES["OUTLIVE_AGENT_MODULES"] = MANY
    flood_n = 1000 if args.quick else args.flood
    async with bench_env() as env:
        conn = await asyncpg.connect(env.database_url)
        (quiet_id, quiet_token), (noisy_id, noisy_token) = await make_tenants(conn, 2)
        slugs = {r["id"]: r["slug"] for r in await conn.fetch("SELECT id, slug FROM tenants")}
        port = free_port()
        vars = env.vars(**AGENT_MODULES)
        lag = Lag([free_port(), free_port()])
        with ExitStack() as stack:
            stack.enter_context(outlive("api", "--port", str(port), env=vars))
            logs = [Path(stack.enter_context(TemporaryDirectory())) / f"w{i}.log" for i in (0, 1)]
            for metrics_port, log in zip(lag.ports, logs, strict=True):
                own = {**vars, "OUTLIVE_METRICS_PORT": str(metrics_port)}
                own["OUTLIVE_METRICS_HOST"] = "127.0.0.1"
                stack.enter_context(outlive("worker", "--concurrency", "32", env=own, log=log))
            await wait_http(f"http://127.0.0.1:{port}/healthz", timeout=300)  # a loaded machine
            for metrics_port in lag.ports:
                await wait_http(f"http://127.0.0.1:{metrics_port}/metrics", timeout=300)
            await warm(logs)
            quiet = Tenant(quiet_id, quiet_token, KeepAlive("127.0.0.1", port))
            cold = await warm_up(conn, quiet)
            shape: dict[str, Any] = {
                "noisy_delay_ms": args.noisy_delay_ms,
                "lag": lag,
                "jitter_ms": args.noisy_jitter_ms,
            }
            phases = [
                await phase(conn, env, "1. quiet alone", quiet, None, flood_n, lag=lag),
                await phase(conn, env, "2. noisy alone", None, noisy_id, flood_n, **shape),
                await phase(conn, env, "3. both, capped", quiet, noisy_id, flood_n, **shape),
            ]
            noisy = Tenant(noisy_id, noisy_token, KeepAlive("127.0.0.1", port))
            made = await noisy.gql(SET_BUDGET, {"l": flood_n * 10 // 2})  # half its spend
            name = "4. both, noisy held by a budget"
            phases.append(
                await phase(conn, env, name, quiet, noisy_id, flood_n, **shape, usage=PER_TURN)
            )
            held = await conn.fetchval(
                "SELECT count(*) FROM runs WHERE tenant_id = $1 AND waiting_for = 'budget'",
                noisy_id,
            )
            await noisy.gql(DELETE_BUDGET, {"id": made["setBudget"]["id"]})  # lets them go
            await settled(conn, noisy_id, held_too=True)
            set_cap(env, slugs[noisy_id], "100000")
            phases.append(
                await phase(conn, env, "5. both, no cap", quiet, noisy_id, flood_n, **shape)
            )
            late: list[float] = []  # phase 6's runs: start minus fire time (ms)
            if args.schedules:
                set_cap(env, slugs[noisy_id], "10")  # the default again
                fired, late = await scheduled_phase(conn, env, quiet, noisy_id, args, lag)
                phases.append(fired)
        await conn.close()
    print(
        f"noisy neighbour: a flood of {flood_n} runs (1 turn of {args.noisy_delay_ms} ms"
        f" +/- {args.noisy_jitter_ms} ms),"
        " 2 workers x 32, default cap 10"
    )
    print("warm-up runs (not counted), start-to-claim ms:", " ".join(f"{c:.1f}" for c in cold))
    print(report(phases))
    print(breakdown(phases))
    capped, idle, alone = phases[2], phases[0], phases[1]
    quiet_ratio = (capped.quiet(0.99) or 0) / (idle.quiet(0.99) or 1)
    noisy_ratio = (capped.noisy_per_s or 0) / (alone.noisy_per_s or 1)
    print(f"targets: quiet p99 <= 2x idle: {quiet_ratio:.2f}x;", end=" ")
    print(f"noisy >= 80% of alone: {noisy_ratio:.0%}")
    budget_ratio = (phases[3].quiet(0.99) or 0) / (idle.quiet(0.99) or 1)
    print(f"phase 4: {held} of the flood's {flood_n} runs held WAITING by the noisy tenant's")
    print(f"budget; quiet p99 <= 2x idle while they pile up: {budget_ratio:.2f}x")
    if args.schedules:
        ratio = (phases[-1].quiet(0.99) or 0) / (idle.quiet(0.99) or 1)
        print(
            f"phase 6: quiet p99 <= 2x idle while {args.schedules:,} schedules fire: {ratio:.2f}x;"
        )
        print(
            f"their {len(late):,} runs started {pct(late, 0.5):.0f} ms (p50),"
            f" {pct(late, 0.99):.0f} ms (p99), {max(late):.0f} ms (max) after fire time"
        )


if __name__ == "__main__":
    asyncio.run(main())
