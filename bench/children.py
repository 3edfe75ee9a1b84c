"""Benchmark: child runs. The overhead of `ctx.call`, a fan-out of 1,000 children under faults,
and a cascade of 1,000 live descendants.

    uv run python bench/children.py [--calls 200] [--fanout 1000] [--parallel 50]
                                    [--kill-every 5] [--no-chaos] [--cascade-fanout 10]

1. Overhead. One `demo` parent with `children: N, maxParallel: 1, childTurns: 1, delayMs: 0`:
   `ctx.map` starts one child at a time, so each child is a whole spawn → child RUNNING →
   settled → parent resumed with its result. From the timelines (PostgreSQL's clock):
   spawn → child RUNNING (the parent's `child_started` to the child's `claimed`), and spawn →
   result back in the parent (`child_started` to the parent's next `claimed`). The floor, in
   the same run: a bare asyncpg ping-pong (INSERT a row and NOTIFY; a second connection
   LISTENing answers with an UPDATE and a NOTIFY back), the least two processes can do through
   PostgreSQL to hand work over and back.
   Target (the issue): p50 <= 150 ms, p99 <= 500 ms.
2. Fan-out under faults (unless --no-chaos). A parent maps over `--fanout` children with
   `maxParallel` `--parallel`, two workers, one SIGKILLed (and started again) every
   `--kill-every` seconds, and Redis flushed once midway. Reported: duplicates (children per
   step: must be 1), children run to completion more than once (`succeeded` events per child:
   must be 1), the parent's status and its outputs' order, the parent's worker slots while it
   waited (samples WAITING for children with a lease held: must be 0; it is RUNNING between
   waits, each settled child waking it to start the next), and how long after the last child's
   settle the parent resumed.
3. Cascade (unless --cascade-fanout 0). The `family` agent's `tree` (tests/children_agents.py)
   grows `--cascade-fanout` children a level, 3 levels (10: 1,110 descendants, 1,000 live leaves
   at depth 3, each WAITING for a signal that never comes); then `cancelRun(root)` (the service,
   as the API calls it). Reported: how long until every descendant settled (target: 5 s), and
   how many descendants were claimed after the cancel committed (must be 0): a claim's `at` is
   its statement's start, so a claim later than PostgreSQL's clock read just after the cancel's
   commit returned saw the root cancelled. Claims that began while the cancel's transaction was
   still open (after its `now()`, before its commit) saw the root live, as they must; they are
   counted apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from uuid import UUID

import asyncpg
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Env, bench_env, outlive, table


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def seed_parent(conn: asyncpg.Connection, slug: str, input: dict[str, object]) -> str:
    tenant = await conn.fetchval(
        "INSERT INTO tenants (slug, name, max_running_runs) VALUES ($1, $1, 1000) RETURNING id",
        slug,
    )
    run_id = await conn.fetchval(
        "INSERT INTO runs (tenant_id, agent, input, key, dispatched_at, relay_after)"
        " VALUES ($1, 'demo', $2::jsonb, $3, now(), now()) RETURNING id",
        tenant,
        json.dumps(input),
        slug,
    )
    return str(run_id)


async def wait_settled(conn: asyncpg.Connection, run_id: str, timeout: float) -> str:
    began = time.monotonic()
    while True:
        status = await conn.fetchval("SELECT status FROM runs WHERE id = $1", run_id)
        if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return str(status)
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"run {run_id} still {status} after {timeout}s")
        await asyncio.sleep(0.25)


async def overhead(conn: asyncpg.Connection, calls: int) -> tuple[list[float], list[float]]:
    parent = await seed_parent(
        conn,
        "overhead",
        {"turns": 1, "delayMs": 0, "children": calls, "maxParallel": 1, "childTurns": 1},
    )
    status = await wait_settled(conn, parent, 600)
    if status != "SUCCEEDED":
        raise RuntimeError(f"the overhead parent {status}")
    rows = await conn.fetch(
        """SELECT s.at AS spawned,
                  (SELECT min(c.at) FROM run_events c WHERE c.run_id = (s.data->>'childId')::uuid
                    AND c.type = 'claimed') AS running,
                  (SELECT min(b.at) FROM run_events b WHERE b.run_id = s.run_id
                    AND b.type = 'claimed' AND b.seq > s.seq) AS back
             FROM run_events s WHERE s.run_id = $1 AND s.type = 'child_started'""",
        parent,
    )
    to_running = [(r["running"] - r["spawned"]).total_seconds() for r in rows]
    to_back = [(r["back"] - r["spawned"]).total_seconds() for r in rows if r["back"]]
    return to_running, to_back


async def floor(url: str, n: int) -> list[float]:
    a, b = await asyncpg.connect(url), await asyncpg.connect(url)
    await a.execute("CREATE TABLE IF NOT EXISTS pingpong (id int PRIMARY KEY, back boolean)")
    got: asyncio.Queue[str] = asyncio.Queue()

    async def answer(conn: asyncpg.Connection, pid: int, channel: str, payload: str) -> None:
        await b.execute("UPDATE pingpong SET back = true WHERE id = $1", int(payload))
        await b.execute("SELECT pg_notify('pong', $1)", payload)

    await b.add_listener("ping", answer)
    await a.add_listener("pong", lambda *args: got.put_nowait(args[3]))
    out = []
    for i in range(n):
        began = time.perf_counter()
        await a.execute("INSERT INTO pingpong VALUES ($1, false)", i)
        await a.execute("SELECT pg_notify('ping', $1)", str(i))
        await got.get()
        out.append(time.perf_counter() - began)
    await a.close()
    await b.close()
    return out


async def fanout(
    env_vars: dict[str, str], conn: asyncpg.Connection, redis: Redis, args: argparse.Namespace
) -> list[list[object]]:
    parent = await seed_parent(
        conn,
        "fanout",
        {
            "turns": 1,
            "delayMs": 50,
            "children": args.fanout,
            "maxParallel": args.parallel,
            "childTurns": 2,
        },
    )
    log = Path("/tmp") / "outlive-bench-children-worker.log"  # noqa: S108 (a scratch log)
    vars = {**env_vars, "OUTLIVE_RUN_HEARTBEAT_S": "3", "OUTLIVE_RUN_SWEEP_S": "1"}
    held_samples, waiting_samples, running_samples, kills, flushed = 0, 0, 0, 0, False
    began = time.monotonic()
    with outlive("worker", "--concurrency", "32", env=vars, log=log):
        victim = outlive("worker", "--concurrency", "32", env=vars, log=log)
        process = victim.__enter__()
        next_kill = time.monotonic() + args.kill_every
        while True:
            status, waiting_for, leased = await conn.fetchrow(
                "SELECT status, waiting_for, lease_expires_at IS NOT NULL FROM runs WHERE id = $1",
                parent,
            )
            if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            if waiting_for == "children" and status == "WAITING":
                waiting_samples += 1
                held_samples += leased  # a lease while parked: an attempt holding a worker
            if status == "RUNNING":
                running_samples += 1  # woken by a settled child: spawning the next one
            if time.monotonic() > next_kill:
                process.send_signal(signal.SIGKILL)
                process.wait()
                kills += 1
                victim.__exit__(None, None, None)
                victim = outlive("worker", "--concurrency", "32", env=vars, log=log)
                process = victim.__enter__()
                next_kill = time.monotonic() + args.kill_every
            if not flushed and time.monotonic() - began > 3 * args.kill_every:
                await redis.flushdb()
                flushed = True
            if time.monotonic() - began > 900:
                raise RuntimeError("the fan-out did not finish in 900 s")
            await asyncio.sleep(0.05)
        victim.__exit__(None, None, None)
    elapsed = time.monotonic() - began
    dup = await conn.fetchval(
        "SELECT count(*) FROM (SELECT parent_step FROM runs WHERE parent_id = $1"
        " GROUP BY parent_step HAVING count(*) > 1) d",
        parent,
    )
    twice = await conn.fetchval(
        "SELECT count(*) FROM (SELECT e.run_id FROM run_events e JOIN runs r ON r.id = e.run_id"
        " WHERE r.parent_id = $1 AND e.type = 'succeeded' GROUP BY e.run_id"
        " HAVING count(*) > 1) d",
        parent,
    )
    row = await conn.fetchrow("SELECT status, output FROM runs WHERE id = $1", parent)
    outputs = json.loads(row["output"])["childOutputs"] if row["output"] else []
    in_order = [o["childIndex"] for o in outputs] == list(range(args.fanout))
    resumed = await conn.fetchval(
        """SELECT extract(epoch FROM (SELECT min(at) FROM run_events WHERE run_id = $1
                  AND type = 'claimed' AND at >= (SELECT max(finished_at) FROM runs
                                                   WHERE parent_id = $1))
                  - (SELECT max(finished_at) FROM runs WHERE parent_id = $1))""",
        parent,
    )
    return [
        ["children", args.fanout],
        ["max parallel", args.parallel],
        ["worker SIGKILLs", kills],
        ["Redis flushed", "once" if flushed else "no"],
        ["parent", row["status"]],
        ["outputs in input order", in_order],
        ["duplicate children (same step)", dup],
        ["children that succeeded twice", twice],
        ["parent samples WAITING / RUNNING", f"{waiting_samples} / {running_samples}"],
        ["worker slots held while WAITING (samples)", held_samples],
        ["last child settled -> parent claimed", f"{float(resumed or 0) * 1000:.0f} ms"],
        ["elapsed", f"{elapsed:.1f} s"],
    ]


async def cascade(env: Env, conn: asyncpg.Connection, fanout: int) -> list[list[object]]:
    """`cancelRun(root)` with fanout^3 live leaves at depth 3 (the `family` agent's `tree`: each
    level maps `fanout` children; the leaves wait for a signal that never comes)."""
    from outlive.config import Settings
    from outlive.ids import RunId, TenantId
    from outlive.runtime import open_runtime
    from outlive.services.runs import cancel_run

    root = await seed_parent(conn, "cascade", {"mode": "tree", "depth": 3, "fanout": fanout})
    await conn.execute("UPDATE runs SET agent = 'family' WHERE id = $1", root)
    tenant = await conn.fetchval("SELECT tenant_id FROM runs WHERE id = $1", root)
    total = fanout + fanout**2 + fanout**3
    vars = env.vars(OUTLIVE_AGENT_MODULES="tests.children_agents:AGENTS", PYTHONPATH=str(ROOT))
    log = Path("/tmp") / "outlive-bench-children-cascade.log"  # noqa: S108 (a scratch log)
    descendants = "SELECT count(*) FROM runs WHERE root_id = $1"
    live = descendants + " AND status IN ('QUEUED', 'RUNNING', 'WAITING')"
    with outlive("worker", "--concurrency", "32", env=vars, log=log):
        began = time.monotonic()
        while await conn.fetchval(descendants, root) < total:
            if time.monotonic() - began > 600:
                raise RuntimeError("the tree did not grow in 600 s")
            await asyncio.sleep(0.1)
        grown_s = time.monotonic() - began
        live_at_cancel = await conn.fetchval(live, root)
        settings = Settings(database_url=env.database_url, redis_url=env.redis_url)
        async with open_runtime(settings, "cli-queues") as runtime:  # as a CLI command
            began = time.monotonic()
            async with runtime.sessions.unit(TenantId(tenant)) as uow:
                await cancel_run(uow, RunId(UUID(root)))
            committed = await conn.fetchval("SELECT clock_timestamp()")
            while await conn.fetchval(live, root):
                if time.monotonic() - began > 120:
                    raise RuntimeError("the cascade did not finish in 120 s")
                await asyncio.sleep(0.02)
            cascade_s = time.monotonic() - began
    claims = (
        "SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id WHERE r.root_id = $1"
        " AND e.type = 'claimed' AND e.at > $2"
    )
    cancel_began = await conn.fetchval("SELECT finished_at FROM runs WHERE id = $1", root)
    started_after = await conn.fetchval(claims, root, committed)
    while_committing = await conn.fetchval(claims, root, cancel_began) - started_after
    return [
        ["descendants (depth 3)", f"{total} ({fanout**3} leaves)"],
        ["the tree grew in", f"{grown_s:.1f} s"],
        ["live when cancelRun(root) committed", live_at_cancel],
        ["cancelRun(root) -> every descendant settled", f"{cascade_s * 1000:.0f} ms"],
        ["descendants claimed after the cancel committed", started_after],
        ["claims begun while the cancel was committing", while_committing],
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--parallel", type=int, default=50)
    parser.add_argument("--kill-every", type=float, default=5.0)
    parser.add_argument("--no-chaos", action="store_true")
    parser.add_argument("--cascade-fanout", type=int, default=10, help="0: no cascade phase")
    args = parser.parse_args()
    async with bench_env() as env:
        conn = await asyncpg.connect(env.database_url)
        redis = Redis.from_url(env.redis_url)
        log = Path("/tmp") / "outlive-bench-children-overhead.log"  # noqa: S108
        with outlive("worker", "--concurrency", "32", env=env.vars(), log=log):
            to_running, to_back = await overhead(conn, args.calls)
        floor_s = await floor(env.database_url, args.calls)
        rows = [
            [name, len(v), f"{pct(v, 50) * 1000:.1f}", f"{pct(v, 99) * 1000:.1f}"]
            for name, v in (
                ("spawn -> child RUNNING", to_running),
                ("spawn -> result back in the parent", to_back),
                ("floor: asyncpg NOTIFY ping-pong", floor_s),
            )
        ]
        print(table(rows, ["ctx.call (demo child, 1 turn, 0 ms)", "n", "p50 ms", "p99 ms"]))
        if not args.no_chaos:
            print(table(await fanout(env.vars(), conn, redis, args), ["fan-out", "value"]))
        if args.cascade_fanout:
            rows = await cascade(env, conn, args.cascade_fanout)
            print(table(rows, ["cascade", "value"]))
        await conn.close()
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main())
