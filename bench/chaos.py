"""Benchmark: issue 9's chaos run, longer than CI's, and its figures.

    uv run python bench/chaos.py [--quick] [--runs N] [--fault-s S] [--seed N]

2 `outlive api` + 3 `outlive worker` processes (heartbeat 3 s, sweep 2 s) against a database and a
Redis server (AOF, appendfsync always) of the run's own. 20 tenants each start `demo` runs one
after another (3 turns of 300 ms, every 4th with one retryable fault), at least 15 each and until
the faults end, with one webhook endpoint each. For 120 s a random worker is SIGKILLed every 3 to
7 s and replaced, one API process is SIGKILLed and restarted, and Redis is SIGKILLed and restarted.
Then every run and delivery is read through the API until settled, and the database is checked
(the scenario and its checks are tests/chaos/harness.py, shared with CI's smaller run).

Prints: runs, kills, stranded (target 0), concurrent attempts (target 0), failed (target 0: no
run asks to fail), lost attempts, deliveries delivered and seen by the receiver, and the time
from a worker's SIGKILL to the re-claim of the run it held, p50 and p99 (target p99 ≤ 10 s with a
3 s heartbeat). The floor for that latency is the heartbeat itself: a lease outlives its last
heartbeat by one heartbeat period, so no take-over can come sooner.

Needs PostgreSQL (BENCH_DATABASE_URL; default the local one) and a `redis-server` binary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import bench_env, table

from tests.chaos.harness import Plan, Report, run_chaos


def figures(report: Report) -> str:
    plan = report.plan
    p50, p99 = report.percentile(0.5), report.percentile(0.99)
    rows = [
        ("runs", report.runs, f"{plan.tenants} tenants, at least {plan.runs_per_tenant} each"),
        ("fault window", f"{plan.fault_s:g} s", f"whole run {report.elapsed_s:g} s"),
        ("workers SIGKILLed", report.worker_kills, f"every {plan.kill_every_s} s"),
        ("API / Redis SIGKILLed", f"{report.api_kills} / {report.redis_kills}", "restarted"),
        ("stranded", report.stranded, "target 0"),
        ("concurrent attempts", report.concurrent_attempts, "target 0"),
        ("failed", report.failed, "target 0 (no run asks to fail)"),
        ("refused at start", report.refused, "QUEUE_UNAVAILABLE while Redis was down"),
        ("attempts lost to a dead worker", report.lost_attempts, "taken over"),
        ("deliveries delivered", f"{report.delivered}/{report.deliveries}", "target all"),
        ("webhook-ids unseen", report.unseen_webhook_ids, "target 0"),
        ("death to re-claim p50", _s(p50), f"{len(report.reclaim_s)} take-overs"),
        ("death to re-claim p99", _s(p99), f"target <= 10 s; floor {plan.heartbeat_s:g} s"),
        ("invariant violations", len(report.violations), "target 0"),
    ]
    return table(rows, ("", "figure", "note"))


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="CI's size: 60 runs, 40 s")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--runs", type=int, default=15, help="runs per tenant")
    parser.add_argument("--fault-s", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args()
    plan = Plan(
        tenants=6 if args.quick else args.tenants,
        runs_per_tenant=10 if args.quick else args.runs,
        fault_s=40 if args.quick else args.fault_s,
        seed=args.seed,
        settle_timeout_s=240,
        keep_going=True,
    )
    async with bench_env() as env:
        with tempfile.TemporaryDirectory(prefix="outlive-chaos-") as workdir:
            report = await run_chaos(plan, env.database_url, Path(workdir))
    print(figures(report))
    if report.violations:
        print(json.dumps(report.violations[:20], indent=1))


if __name__ == "__main__":
    asyncio.run(main())
