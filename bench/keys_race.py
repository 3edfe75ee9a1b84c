"""Benchmark and proof: the key race of issue 27 at full size (100 keys x 20 `startRun` each,
all at once, once per strategy), 2 API processes and several workers, clean and then under
rolling worker SIGKILLs. Prints, per strategy, the time to settle everything, the 10 ms samples
taken and the problems found (`tests/keys/race.py` says what is checked).

    uv run python bench/keys_race.py [--keys 100] [--starts 20] [--workers 3] [--kill-every 2]
                                     [--strategies ENQUEUE,REJECT] [--skip-clean]
                                     [--heartbeat-s 1]

Needs PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL, BENCH_REDIS_DB).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import bench_env, table

from tests.keys.race import STRATEGIES, Race, run_race


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=2.0, help="0: no SIGKILL round")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--skip-clean", action="store_true", help="the SIGKILL round only")
    parser.add_argument(
        "--heartbeat-s", type=float, help="OUTLIVE_RUN_HEARTBEAT_S (the lease); default: 10"
    )
    args = parser.parse_args()
    strategies = tuple(s for s in args.strategies.split(",") if s)
    rows = []
    phases = ([] if args.skip_clean else [None]) + ([args.kill_every] if args.kill_every else [])
    for kill in phases:
        race = Race(
            keys=args.keys,
            starts=args.starts,
            workers=args.workers,
            kill_every_s=kill,
            heartbeat_s=args.heartbeat_s,
        )
        async with bench_env() as env:
            rounds = await run_race(race, env.database_url, env.redis_url, strategies)
        for rnd in rounds:
            rows.append(
                [
                    rnd.strategy,
                    "sigkills" if kill else "clean",
                    f"{rnd.seconds:.1f}",
                    str(rnd.samples),
                    str(len(rnd.problems)),
                    "; ".join(rnd.problems[:3]),
                ]
            )
        print(table(rows, HEADERS), flush=True)  # each phase as it ends: a long run shows it


HEADERS = ["strategy", "faults", "seconds", "samples", "problems", "first"]


if __name__ == "__main__":
    asyncio.run(main())
