"""Benchmark: the `llm` named limit at full size, across workers and tenants.

    uv run python bench/model_limits.py [--rate 60/60] [--turns 20] [--own 20/60]

4 in-process workers (`WorkerHost`s, each with its own runtime: PostgreSQL pool, Redis clients,
LISTEN connection) and 3 tenants each running an `llm` conversation of `--turns` replies against
a local OpenAI-compatible stub on loopback, with `OUTLIVE_LIMIT_LLM=--rate` and the first tenant
held to its own rate `--own`. Figures: the most calls the stub saw in any window of the rate's
length (target: at most count + 1), the most of the limited tenant's (at most its count + 1),
and each other tenant's (at most its share + 1). Floor: the same conversations with no limit,
in the same run (how fast the calls come when nothing holds them back).

Needs PostgreSQL (BENCH_DATABASE_URL; default the local one) and Redis (BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import Env, bench_env, table

from outlive.config import Rate, Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.services.limits import set_llm_rate
from outlive.services.tenants import create_token
from outlive.worker import WorkerHost
from tests.agents.stub_model import StubModel, serve
from tests.support import Api, TenantHandle


def most_in_window(arrivals: list[float], window: float) -> int:
    ordered, most, start = sorted(arrivals), 0, 0
    for end, at in enumerate(ordered):
        while at - ordered[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


async def scenario(env: Env, rate: Rate | None, own: Rate | None, turns: int) -> dict[str, object]:
    model = StubModel(turns=turns)
    async with serve(model) as url, AsyncExitStack() as stack:
        settings = Settings(
            database_url=env.database_url,
            redis_url=env.redis_url,
            llm_base_url=url,
            llm_model="tiny",
            limit_llm=rate,
        )
        engine = create_engine(env.database_url)
        stack.push_async_callback(engine.dispose)
        sessions = create_sessions(engine)
        tenants = []
        for _ in range(3):
            slug = f"bench-{secrets.token_hex(4)}"
            async with sessions.unit() as uow:
                principal, token = await create_token(uow, tenant_slug=slug, email=f"o@{slug}.test")
            tenants.append(TenantHandle(principal=principal, token=token))
        if own is not None:
            async with sessions.unit() as uow:
                await set_llm_rate(uow, tenant_slug=tenants[0].principal.tenant.slug, rate=own)
        for _ in range(4):
            host = WorkerHost(settings, concurrency=4)
            await host.start()
            stack.push_async_callback(host.stop)
        api = await stack.enter_async_context(Api.running(settings))
        began = time.monotonic()
        for tenant in tenants:
            await api.start_run(tenant.token, "llm", {"prompt": str(tenant.id), "maxTurns": turns})
        while len(model.requests) < 3 * turns:
            await model.wait_for_requests(len(model.requests) + 1, timeout=600)
        took = time.monotonic() - began
    window = rate.per_s if rate is not None else 60.0
    by_tenant: dict[str, list[float]] = {}
    for request, at in zip(model.requests, model.arrivals, strict=True):
        by_tenant.setdefault(request["messages"][0]["content"], []).append(at)
    mine = [by_tenant.get(str(t.id), []) for t in tenants]
    return {
        "all": most_in_window(model.arrivals, window),
        "limited": most_in_window(mine[0], window),
        "others": max(most_in_window(m, window) for m in mine[1:]),
        "took": took,
    }


async def bench(env: Env, args: argparse.Namespace) -> None:
    rate = Rate.parse(args.rate)
    own = Rate.parse(args.own)
    if not isinstance(rate, Rate) or not isinstance(own, Rate):
        raise SystemExit("--rate and --own are N/S")
    limited = await scenario(env, rate, own, args.turns)
    floor = await scenario(env, None, None, args.turns)
    share = max(1, int(rate.count * 0.5))
    rows = [
        [
            f"most calls in any {rate.per_s:g} s",
            limited["all"],
            floor["all"],
            f"<= {rate.count + 1}",
        ],
        [
            "... of the tenant held to " + args.own,
            limited["limited"],
            floor["limited"],
            f"<= {own.count + 1}",
        ],
        ["... of another tenant (the most)", limited["others"], floor["others"], f"<= {share + 1}"],
        ["all conversations done (s)", f"{limited['took']:.1f}", f"{floor['took']:.1f}", ""],
    ]
    print(table(rows, ["figure", "limited", "floor (no limit)", "target"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", default="60/60", help="OUTLIVE_LIMIT_LLM")
    parser.add_argument("--own", default="20/60", help="the first tenant's own rate")
    parser.add_argument("--turns", type=int, default=20, help="replies per conversation")
    args = parser.parse_args()

    async def go() -> None:
        async with bench_env() as env:
            await bench(env, args)

    asyncio.run(go())


if __name__ == "__main__":
    main()
