"""Benchmark: the typed jobs queue beside plain saq.

    uv run python bench/jobs.py [--quick]

1. Consumer throughput: N envelope jobs through the real consumer (parse + validate the envelope,
   dispatch on its type, a no-op handler that opens and closes its database session) beside N
   plain saq no-op jobs, each drained by an in-process saq worker of the same concurrency.
   Rounds alternate so both see the same machine.
2. Producer cost: building and validating an envelope and enqueueing it, beside a raw
   `queue.enqueue` of a no-op, sequentially (p50 latency) and 16 at a time (throughput).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, load, table
from saq import Worker

from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.jobs.consumer import consume
from outlive.jobs.deps import JobDeps
from outlive.jobs.envelopes import ENVELOPES, Payload
from outlive.jobs.handlers import Handler
from outlive.jobs.mailer import LogMailer
from outlive.jobs.producer import CONSUME_TASK, SaqJobProducer
from outlive.jobs.queues import create_queue

CONCURRENCY = 16


class Noop(Payload):
    n: int


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def drain(queue: Any, worker: Worker[Any], count: int) -> float:
    """Seconds for `worker` to finish `count` jobs already in `queue`."""
    began = time.perf_counter()
    task = asyncio.create_task(worker.start())
    while await queue.count("incomplete"):
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - began
    await worker.stop()
    task.cancel()
    return count / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count = 500 if args.quick else 3000
    async with bench_env() as env:
        settings = Settings(
            database_url=env.database_url, redis_url=env.redis_url, queue_timeout_s=60
        )
        engine = create_engine(env.database_url)
        sessions = create_sessions(engine)
        types = ENVELOPES.with_type("bench.noop.v1", Noop)

        async def open_a_session(deps: JobDeps, payload: Noop) -> None:
            async with deps.sessions.unit():
                pass

        async def never(deps: JobDeps, payload: Noop, error: str) -> None:
            raise AssertionError(error)

        plain_rates, envelope_rates = [], []
        for round_ in range(3):
            plain_q = create_queue(env.redis_url, f"bench-plain-{round_}")
            for i in range(count):
                await plain_q.enqueue("noop", key=f"p{i}", timeout=60)
            worker: Worker[Any] = Worker(plain_q, functions=[noop], concurrency=CONCURRENCY)
            worker.SIGNALS = []
            plain_rates.append(await drain(plain_q, worker, count))

            env_q = create_queue(env.redis_url, f"bench-envelope-{round_}")
            producer = SaqJobProducer(env_q, settings, types)
            await producer.send([types.build("bench.noop.v1", {"n": i}) for i in range(count)])
            worker = Worker(env_q, functions=[(CONSUME_TASK, consume)], concurrency=CONCURRENCY)
            worker.SIGNALS = []
            worker.context["outlive"] = SimpleNamespace(
                jobs=JobDeps(
                    sessions=sessions,
                    http=None,  # type: ignore[arg-type]  # the no-op handler never calls out
                    settings=settings,
                    mailer=LogMailer(),
                    types=types,
                    handlers={**{k: Handler(open_a_session, never) for k in types.payloads}},
                )
            )
            envelope_rates.append(await drain(env_q, worker, count))
            await plain_q.disconnect()
            await env_q.disconnect()

        raw_q = create_queue(env.redis_url, "bench-raw")
        prod_q = create_queue(env.redis_url, "bench-producer")
        producer = SaqJobProducer(prod_q, settings, types)
        n = 300 if args.quick else 2000

        async def raw(i: int) -> None:
            await raw_q.enqueue("noop", timeout=60)

        async def produced(i: int) -> None:
            await producer.send([producer.build("bench.noop.v1", {"n": i})])

        figures = {}
        for conc in (1, CONCURRENCY):
            figures[("raw", conc)] = await load("raw", raw, n, conc)
            figures[("producer", conc)] = await load("producer", produced, n, conc)
        await raw_q.disconnect()
        await prod_q.disconnect()
        await engine.dispose()

    plain, env_rate = statistics.median(plain_rates), statistics.median(envelope_rates)
    print(f"consumer: {count} jobs, concurrency {CONCURRENCY}, median of 3 rounds")
    print(
        table(
            [
                ["plain saq no-op", f"{plain:.0f}", "1.00"],
                ["envelope + dispatch + session", f"{env_rate:.0f}", f"{env_rate / plain:.2f}"],
            ],
            ["jobs", "jobs/s", "vs plain"],
        )
    )
    print()
    print("producer: enqueue cost")
    rows = []
    for conc in (1, CONCURRENCY):
        r, p = figures[("raw", conc)], figures[("producer", conc)]
        rows.append(
            [
                conc,
                f"{r.p50_ms:.3f}",
                f"{p.p50_ms:.3f}",
                f"{r.per_s:.0f}",
                f"{p.per_s:.0f}",
                f"{p.per_s / r.per_s:.2f}",
            ]
        )
    print(table(rows, ["conc", "raw p50 ms", "producer p50 ms", "raw/s", "producer/s", "ratio"]))


if __name__ == "__main__":
    asyncio.run(main())
