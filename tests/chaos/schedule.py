"""The faults of the chaos run, when each happens, and the windows they were in force.

Rolling worker SIGKILLs run for the whole fault window. The one-off faults of the plan come one
after another, in `ONE_OFF` order, spread evenly over it, so no two overlap and each one's
recovery can be measured on its own. CPU starvation (`cpu`) is not scheduled: it lasts the whole
run (see `harness.run_chaos`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.faults import OwnPostgres, OwnRedis

if TYPE_CHECKING:
    from tests.chaos.harness import Fleet, Plan, Report

KINDS = {
    "worker": "a random worker SIGKILLed every few seconds, and replaced",
    "api": "one API process SIGKILLed and restarted",
    "redis-kill": "Redis SIGKILLed and restarted with its AOF (it loses nothing)",
    "redis-flush": "Redis FLUSHALL mid-run: every job, schedule and lock gone",
    "redis-empty": "Redis SIGKILLed and restarted without its AOF: an empty Redis",
    "redis-stop": "Redis SIGSTOPped (nothing answers, connections stay open), then SIGCONT",
    "postgres": "PostgreSQL SIGKILLed (postmaster and backends) and restarted: crash recovery",
    "cpu": "one busy loop per core for the whole run",
}
DEFAULT = ("worker", "api", "redis-kill")  # issue 9's run: what `bench/chaos.py` does by default
ONE_OFF = ("api", "redis-kill", "redis-flush", "redis-empty", "redis-stop", "postgres")
REDIS = ("redis-kill", "redis-flush", "redis-empty", "redis-stop")


def parse_faults(text: str) -> tuple[str, ...]:
    """`all`, or a comma list of `KINDS`."""
    if text.strip() == "all":
        return tuple(KINDS)
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: all, {', '.join(KINDS)}")
    return kinds


@dataclass(frozen=True)
class Window:
    """A fault in force, in wall-clock seconds: from when it began to when the server it broke
    answered again (`start == end` for FLUSHALL, over at once)."""

    kind: str
    start: float
    end: float


Probe = Callable[[], Awaitable[float]]  # sends mutations until one succeeds; returns when


class Faults:
    """Applies the plan's faults for `fault_s`, recording every window in `report.windows`."""

    def __init__(
        self,
        plan: Plan,
        report: Report,
        *,
        fleet: Fleet,
        redis: OwnRedis,
        postgres: OwnPostgres | None,
        probe: Probe,
    ) -> None:
        self.plan, self.report, self.fleet = plan, report, fleet
        self.redis, self.postgres, self.probe = redis, postgres, probe
        self.rng = random.Random(plan.seed)
        self._recoveries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        await asyncio.gather(self._rolling(), self._one_offs())

    async def close(self) -> None:
        """After the settle: a recovery probe still waiting for a successful mutation never got
        one; it is reported as such."""
        for task in self._recoveries:
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)

    async def _rolling(self) -> None:
        """A kill every `kill_every_s` on a clock: one that had to wait for a replacement to
        come up (the last worker is never killed) does not push the next ones back."""
        loop = asyncio.get_running_loop()
        began = due = loop.time()
        while loop.time() - began < self.plan.fault_s:
            due += self.rng.uniform(*self.plan.kill_every_s)
            await asyncio.sleep(max(0.0, due - loop.time()))  # the schedule is a clock
            if "worker" in self.plan.faults:
                self.report.worker_kills += await self.fleet.kill_a_worker(self.rng)

    async def _one_offs(self) -> None:
        kinds = [k for k in ONE_OFF if k in self.plan.faults]
        busy = self.plan.redis_stop_s * ("redis-stop" in kinds)
        busy += self.plan.postgres_down_s * ("postgres" in kinds)
        gap = max(1.0, (self.plan.fault_s - busy) / (len(kinds) + 1))
        for kind in kinds:
            await asyncio.sleep(gap)
            began = time.time()
            await getattr(self, "_" + kind.replace("-", "_"))()
            if kind != "postgres":  # its window is recorded when it answers again
                self._over(kind, began)

    def _over(self, kind: str, began: float) -> float:
        ended = time.time()
        self.report.windows.append(Window(kind, began, ended))
        self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
        return ended

    async def _api(self) -> None:
        await self.fleet.kill(self.rng.choice(self.fleet.apis))
        await self.fleet.start("api", tries=5)
        self.report.api_kills += 1

    async def _redis_kill(self) -> None:
        await self.redis.restart()
        self.report.redis_kills += 1

    async def _redis_flush(self) -> None:
        await self.redis.flushall()

    async def _redis_empty(self) -> None:
        await self.redis.restart(empty=True)

    async def _redis_stop(self) -> None:
        self.redis.freeze()
        try:
            await asyncio.sleep(self.plan.redis_stop_s)  # the fault is a duration
        finally:
            self.redis.thaw()

    async def _postgres(self) -> None:
        """SIGKILL, `postgres_down_s` down, restart; meanwhile the probe sends mutations until
        one succeeds, which gives the time from PostgreSQL's return to the first success."""
        assert self.postgres is not None, "the postgres fault needs a cluster of the run's own"
        began = time.time()
        await self.postgres.kill()
        ready: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def recovery() -> None:
            succeeded = await self.probe()
            self.report.pg_recovery_s.append(succeeded - await ready)

        task = asyncio.create_task(recovery())
        self._recoveries.add(task)
        task.add_done_callback(self._recoveries.discard)
        try:
            await asyncio.sleep(self.plan.postgres_down_s)  # the fault is a duration
        finally:
            await self.postgres.start()
            ready.set_result(self._over("postgres", began))
