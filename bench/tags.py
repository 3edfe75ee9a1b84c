"""Benchmark: `runs(tags: [...])` with 1,000,000 runs over 1,000 tenants (issue 27).

    uv run python bench/tags.py [--tenants 1000] [--per-tenant 1000] [--queries 400]

A fresh migrated database is seeded in PostgreSQL itself (one INSERT … SELECT generate_series):
every tenant has `--per-tenant` runs, a fifth of them over the last day; tags are drawn so that
each kind of selectivity is there:
- `common`: on 30% of every tenant's runs;
- `vip`: on 1% of them;
- `t<k>`: a tag only tenant k uses, on 5% of its runs (the other tenants' GIN entries are
  plenty, but never its).
Queries are made through the service (`services.runs.read_runs`, the statement the API runs:
first 20, newest first) for a random tenant each, alternating between:
- the floor: `runs(first: 20)`, no filter (`ix_runs_tenant_newest`);
- `tags: ["common"]`, `["vip"]`, `["t<k>"]`, and `["common", "vip"]`.
Reported per query: p50 and p99 in ms, and the plan PostgreSQL chose (EXPLAIN, once).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, table

SEED = """
INSERT INTO tenants (slug, name)
SELECT 'tags-' || t, 'tags-' || t FROM generate_series(1, $1) t;
"""
RUNS = """
INSERT INTO runs (tenant_id, agent, input, status, created_at, finished_at, tags)
SELECT t.id, 'demo', '{}'::jsonb, 'SUCCEEDED',
       now() - make_interval(secs => (random() * 86400 * 5)::int),
       now(),
       array_remove(ARRAY[
         CASE WHEN random() < 0.30 THEN 'common' END,
         CASE WHEN random() < 0.01 THEN 'vip' END,
         CASE WHEN random() < 0.05 THEN 't' || t.n END
       ], NULL)::varchar[]
  FROM (SELECT id, row_number() OVER (ORDER BY slug) AS n FROM tenants
         WHERE slug LIKE 'tags-%') t,
       generate_series(1, $1) r
"""


async def seed(url: str, tenants: int, per_tenant: int) -> float:
    conn = await asyncpg.connect(url)
    began = time.perf_counter()
    try:
        await conn.execute(SEED.replace("$1", str(tenants)))
        await conn.execute(RUNS, per_tenant, timeout=3600)
        await conn.execute("VACUUM ANALYZE runs")
    finally:
        await conn.close()
    return time.perf_counter() - began


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def measure(url: str, queries: int) -> list[list[str]]:
    from outlive.db.engine import create_engine, create_sessions
    from outlive.ids import TenantId
    from outlive.services.runs import read_runs

    engine = create_engine(url)
    sessions = create_sessions(engine)
    conn = await asyncpg.connect(url)
    rows = await conn.fetch(
        "SELECT id, row_number() OVER (ORDER BY slug) AS n FROM tenants WHERE slug LIKE 'tags-%'"
    )
    tenants = [(TenantId(r["id"]), int(r["n"])) for r in rows]
    shapes: dict[str, list[float]] = {}
    names = ["floor (no tags)", "common", "vip", "own tag", "common + vip"]
    rng = random.Random(7)
    for i in range(queries * len(names)):
        name = names[i % len(names)]
        tenant, n = rng.choice(tenants)
        tags = {
            "floor (no tags)": None,
            "common": ["common"],
            "vip": ["vip"],
            "own tag": [f"t{n}"],
            "common + vip": ["common", "vip"],
        }[name]
        began = time.perf_counter()
        async with sessions.unit(tenant, single_statement=True) as uow:
            await read_runs(uow, tenant, first=20, tags=tags)
        shapes.setdefault(name, []).append((time.perf_counter() - began) * 1000)
    plans = {}
    for name, tags in (
        ("vip", ["vip"]),
        ("common", ["common"]),
        ("own tag", [f"t{tenants[0][1]}"]),
    ):
        plan = await conn.fetch(
            "EXPLAIN SELECT * FROM runs WHERE tenant_id = $1"
            " AND outlive_tenant_tags(tenant_id, tags) @> outlive_tenant_tags($1, $2::varchar[])"
            " AND tags <> '{}' ORDER BY created_at DESC, id DESC LIMIT 21",  # the service's
            tenants[0][0],
            tags,
        )
        found = re.findall(r"(?:Index|Seq) Scan (?:Backward )?on (\w+)", str(plan))
        plans[name] = ", ".join(found)
    await conn.close()
    await engine.dispose()
    out = []
    for name in names:
        values = shapes[name]
        out.append(
            [
                name,
                str(len(values)),
                f"{statistics.median(values):.2f}",
                f"{pct(values, 99):.2f}",
                plans.get(name, ""),
            ]
        )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--per-tenant", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=400)
    args = parser.parse_args()
    async with bench_env() as env:
        seconds = await seed(env.database_url, args.tenants, args.per_tenant)
        total = args.tenants * args.per_tenant
        print(f"seeded {total:,} runs over {args.tenants:,} tenants in {seconds:.0f} s")
        rows = await measure(env.database_url, args.queries)
    print(table(rows, ["runs(first: 20, tags:)", "n", "p50 ms", "p99 ms", "indexes in the plan"]))


if __name__ == "__main__":
    asyncio.run(main())
