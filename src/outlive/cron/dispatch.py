"""Turning the table into saq cron jobs, and running one tick.

saq de-duplicates cron jobs by function name (`cron:<name>`), so one shared dispatcher would
silently run only one expression: every expression gets a function of its own, named after it.
Inside a tick each task runs in its own try/except under `TASK_TIMEOUT_S`: a failure is logged
with the task's name and the expression, counted, and its neighbours still run.

Exactly once per tick, with any number of workers: saq's cron key keeps one job per expression
in the queue, and the tick takes a Redis lock on (expression, scheduled time) before it runs, so
a second enqueue of the same tick (workers whose clocks disagree) finds the lock and does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from croniter import croniter
from saq.job import CronJob

from outlive.cron.deps import CronContext, CronDeps, CronTask

log = logging.getLogger(__name__)

TASK_TIMEOUT_S = 300.0
TICK_LOCK_TTL_S = 24 * 3600


@dataclass
class TickReport:
    expression: str
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    touched: dict[str, int] = field(default_factory=dict)
    skipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "ran": self.ran,
            "failed": self.failed,
            "touched": self.touched,
            "skipped": self.skipped,
        }


def task_name(task: CronTask) -> str:
    return getattr(task, "__name__", repr(task))


async def run_tick(
    deps: CronDeps, expression: str, tasks: Sequence[CronTask], *, timeout_s: float = TASK_TIMEOUT_S
) -> TickReport:
    report = TickReport(expression)
    for task in tasks:
        name = task_name(task)
        began = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                report.touched[name] = await task(deps)
            report.ran.append(name)
            log.info(
                "cron %r %s: %s rows in %.2fs",
                expression,
                name,
                report.touched[name],
                time.monotonic() - began,
            )
        except Exception as exc:
            report.failed[name] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.exception("cron %r task %s failed", expression, name)
    return report


def function_name(expression: str) -> str:
    return f"cron[{expression}]"


TickFunction = Callable[..., Awaitable[dict[str, Any]]]


def tick_function(expression: str, tasks: Sequence[CronTask]) -> TickFunction:
    """The saq function for one expression; its name makes its saq cron key unique."""

    async def tick(ctx: CronContext) -> dict[str, Any]:
        deps = ctx["outlive"].cron
        scheduled = getattr(ctx.get("job"), "scheduled", 0) or int(time.time())
        lock = deps.settings.of_cell(f"outlive:cron:{expression}:{scheduled}")
        if not await deps.redis.set(lock, "1", nx=True, ex=TICK_LOCK_TTL_S):
            log.info("cron %r tick %s already ran elsewhere", expression, scheduled)
            return TickReport(expression, skipped=True).as_dict()
        return (await run_tick(replace(deps, tick=scheduled), expression, tasks)).as_dict()

    tick.__name__ = tick.__qualname__ = function_name(expression)
    return tick


def cron_jobs(table: Mapping[str, Sequence[CronTask]]) -> list[CronJob[Any]]:
    jobs = []
    for expression, tasks in table.items():
        if not croniter.is_valid(expression):
            raise ValueError(f"invalid cron expression {expression!r}")
        jobs.append(
            CronJob(
                tick_function(expression, tasks),
                cron=expression,
                unique=True,
                timeout=int(TASK_TIMEOUT_S * max(1, len(tasks)) + 60),
                retries=1,  # a failed tick is not re-run; the next tick does the work
                ttl=3600,
            )
        )
    return jobs
