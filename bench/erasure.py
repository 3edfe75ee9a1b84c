"""Benchmark: `eraseSubject` and per-tenant retention on a seeded database (issue 46).

    uv run python bench/erasure.py [--tenants 1000] [--runs 1000] [--steps 1]
                                   [--subject-runs 10000] [--retained 100000] [--starts 400]
                                   [--rate 100]

A fresh migrated database is seeded in PostgreSQL itself: `--tenants` tenants with `--runs`
settled runs each, `--steps` steps per run (with model usage) and two events per step. Tenant 1
also has `--subject-runs` runs tagged `user:subject` carrying a marker string in their input,
steps and events; tenant 2 has `--retained` runs settled 10 days ago (its retention is then set
to 1 day). Then, through the services the API and the cron task run:

1. `startRun` latency of other tenants alone (p50/p99, `--starts` calls, `--rate` a second in
   an open loop: each call's latency from when it was due);
2. `eraseSubject("user:subject")` while the same `startRun` load runs, from its start to its
   end: its time, the receipt, the longest single statement it issued, and the startRun p99
   meanwhile (ratio to 1.). (Until 2026-12-06 both loads were `--starts` calls 8 at once, as
   fast as they went: a closed loop that saturated the two cores by itself, so any other work
   queued behind it, and that ended after the erasure's first statements.)
3. the retention task (`prune_runs`) over tenant 2: its time, the longest statement, and that
   no other tenant lost a row;
4. usage totals (`usage` runs and `usageTokens` tokens) of tenants 1 and 2 before and after, and a
   full-table text scan of the database for the marker (the equivalent of grepping a pg_dump).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, load, paced, table

from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from outlive.services import erasure, retention, usage, usage_tokens
from outlive.services.runs import start_run
from outlive.services.runs.keys import start_options
from tests.governance.scan import mentions
from tests.workflows.test_claim import NoInstances

MARKER = "subject-marker-7f3a9c"
SEED = """
INSERT INTO tenants (slug, name) SELECT 'er-' || t, 'er-' || t FROM generate_series(1, {tenants}) t;
INSERT INTO runs (tenant_id, agent, input, output, status, created_at, finished_at, step_seq,
                  event_seq, tags)
SELECT t.id, 'demo', '{{}}', '{{"ok": true}}', 'SUCCEEDED', now() - interval '1 hour', now(),
       {steps}, {steps} * 2, ARRAY['user:' || r]::varchar[]
  FROM tenants t, generate_series(1, {runs}) r WHERE t.slug LIKE 'er-%';
INSERT INTO runs (tenant_id, agent, input, output, status, created_at, finished_at, step_seq,
                  event_seq, tags)
SELECT t.id, 'demo', '{{"note": "{marker}"}}', '{{"echo": "{marker}"}}', 'SUCCEEDED',
       now() - interval '1 hour', now(), {steps}, {steps} * 2, ARRAY['user:subject']::varchar[]
  FROM tenants t, generate_series(1, {subject}) r WHERE t.slug = 'er-1';
INSERT INTO runs (tenant_id, agent, input, status, created_at, finished_at, step_seq, event_seq)
SELECT t.id, 'demo', '{{}}', 'SUCCEEDED', now() - interval '10 days', now() - interval '10 days',
       {steps}, {steps} * 2
  FROM tenants t, generate_series(1, {retained}) r WHERE t.slug = 'er-2';
INSERT INTO run_steps (run_id, name, occurrence, seq, attempt, result, requests, input_tokens,
                       output_tokens, model, completed_at)
SELECT r.id, 'turn', s, s, 1, CASE WHEN r.input ? 'note' THEN '"{marker}"' ELSE '1' END::jsonb,
       1, 100, 10, 'demo', r.finished_at
  FROM runs r, generate_series(1, {steps}) s;
INSERT INTO run_events (run_id, seq, type, data)
SELECT r.id, e, 'turn', CASE WHEN r.input ? 'note' THEN '{{"m": "{marker}"}}' ELSE '{{}}' END::jsonb
  FROM runs r, generate_series(1, {steps} * 2) e;
ANALYZE;
"""


class Timed:
    """`Sessions` that times every statement it runs (the longest is the figure)."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions, self.longest, self.statements = sessions, 0.0, 0
        self.which = ""  # the longest statement's first words

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._sessions, name)
        if name not in ("execute", "one", "all"):
            return found

        async def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await found(*args, **kwargs)
            finally:
                self.statements += 1
                took = time.perf_counter() - began
                if took > self.longest:
                    self.longest, self.which = (
                        took,
                        " ".join(str(getattr(args[0], "sql", args[0])).split())[:100],
                    )

        return timed


async def explain(database_url: str, tenant_id: Any) -> None:
    """EXPLAIN ANALYZE of the erasure's lookups of the tag's runs (before it deletes any)."""
    import asyncpg

    params = {"tenant_id": tenant_id, "tag": "user:subject", "began": datetime.now(UTC)}
    params |= {"batch": erasure.PAGE, "ids": []}
    conn = await asyncpg.connect(database_url)
    try:
        for statement in (erasure._NEXT, erasure._TO_CANCEL, erasure._STILL_RUNNING):
            sql = "EXPLAIN (ANALYZE, BUFFERS) " + statement.sql
            rows = await conn.fetch(sql, *statement.args(params))
            print("\n".join(r[0] for r in rows) + "\n")
    finally:
        await conn.close()


async def tenant_ids(sessions: Sessions) -> list[Any]:
    rows = await sessions.all(_TENANTS)
    return [r["id"] for r in rows]


async def totals(sessions: Sessions, tenant_id: Any) -> tuple[int, int]:
    days = await usage.usage(sessions, tenant_id, days=30)
    tokens = await usage_tokens.usage_tokens(sessions, tenant_id, days=30)
    return sum(d.count for d in days), sum(d.input_tokens + d.output_tokens for d in tokens)


def starter(sessions: Sessions, tenants: list[Any]) -> Callable[[int], Any]:
    async def call(i: int) -> None:
        async with sessions.unit(tenants[2 + i % (len(tenants) - 2)]) as uow:
            await start_run(
                uow,
                agent="demo",
                params={},
                instances=NoInstances(),
                options=start_options(
                    key=f"k{i}-{time.monotonic_ns()}",
                    default_key="",
                    on_conflict=None,
                    default_on_conflict=None,
                    tags=None,
                    idempotency_key=None,
                ),
            )

    return call


async def main(args: argparse.Namespace) -> None:
    async with bench_env() as env:
        sessions = create_sessions(create_engine(env.database_url))
        began = time.perf_counter()
        seed = SEED.format(
            tenants=args.tenants, runs=args.runs, steps=args.steps, subject=args.subject_runs,
            retained=args.retained, marker=MARKER,
        )  # fmt: skip
        import asyncpg

        conn = await asyncpg.connect(env.database_url)
        await conn.execute(seed, timeout=7200)
        steps = await conn.fetchval("SELECT count(*) FROM run_steps")
        await conn.close()
        print(f"seeded {steps} steps in {time.perf_counter() - began:.1f}s")
        tenants = await tenant_ids(sessions)
        subject, retained = tenants[0], tenants[1]
        before = [await totals(sessions, t) for t in (subject, retained)]
        if args.explain:
            await explain(env.database_url, subject)
        call = starter(sessions, tenants)
        await load("warm-up", call, 50, 8)
        alone = await paced("startRun alone", call, args.rate, count=args.starts)

        timed = Timed(sessions)
        erase = asyncio.ensure_future(
            erasure.erase_subject(timed, subject, "user:subject", by="bench")  # type: ignore[arg-type]
        )
        began = time.perf_counter()
        during = await paced("startRun during erasure", call, args.rate, until=erase)
        receipt = await erase
        erase_s = time.perf_counter() - began

        await retention.set_retention(sessions, retained, 1)
        pruner = Timed(sessions)
        began = time.perf_counter()
        pruned = await retention.prune_runs(pruner, days=30)  # type: ignore[arg-type]
        prune_s = time.perf_counter() - began
        others = await sessions.one(_OTHERS)
        after = [await totals(sessions, t) for t in (subject, retained)]
        found = await mentions(sessions, MARKER)

        print(table(
            [[f.label, f"{f.p50_ms:.1f}", f"{f.p99_ms:.1f}"] for f in (alone, during)],
            ["startRun of other tenants", "p50 ms", "p99 ms"],
        ))  # fmt: skip
        print(f"p99 during / alone: {during.p99_ms / alone.p99_ms:.2f}x")
        slowest = sorted(zip(during.latencies, during.due, strict=True), reverse=True)[:6]
        print(
            "slowest during (ms, due at s):",
            ", ".join(f"{x * 1000:.1f} @{d:.2f}" for x, d in slowest),
        )
        print(
            f"eraseSubject: {erase_s:.1f}s, {receipt.runs} runs, {receipt.steps} steps,"
            f" {receipt.events} events; {timed.statements} statements, longest"
            f" {timed.longest * 1000:.0f} ms ({timed.which})"
        )
        print(
            f"retention: {pruned} runs in {prune_s:.1f}s; {pruner.statements} statements,"
            f" longest {pruner.longest * 1000:.0f} ms; other tenants' runs left:"
            f" {others['n'] if others else '?'}"
        )
        print(f"usage totals (runs, tokens) before {before} after {after}")
        print(f"tables mentioning the marker after: {found or 'none'}")


from sqlalchemy import text  # noqa: E402

_TENANTS = text("SELECT id FROM tenants WHERE slug LIKE 'er-%' ORDER BY length(slug), slug")
_OTHERS = text(
    "SELECT count(*) AS n FROM runs r JOIN tenants t ON t.id = r.tenant_id"
    " WHERE t.slug NOT IN ('er-1', 'er-2')"
)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1000, help="settled runs per tenant")
    parser.add_argument("--steps", type=int, default=1, help="steps per run")
    parser.add_argument("--subject-runs", type=int, default=10_000)
    parser.add_argument("--retained", type=int, default=100_000, help="tenant 2's old runs")
    parser.add_argument("--starts", type=int, default=400, help="startRun calls alone")
    parser.add_argument("--rate", type=float, default=100.0, help="startRun calls a second")
    parser.add_argument(
        "--explain", action="store_true", help="print the plans of the tag's lookups first"
    )
    asyncio.run(main(parser.parse_args()))
