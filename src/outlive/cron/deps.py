"""What a cron task receives, and the saq context its tick runs with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, Required

from redis.asyncio import Redis
from saq.types import Context

from outlive.config import Settings
from outlive.db.tx import Sessions


@dataclass
class CronDeps:
    sessions: Sessions
    settings: Settings
    redis: Redis
    tick: int | None = None  # the tick's scheduled time (epoch seconds), when saq fired it


# A task returns how many rows it touched (logged), and must be safe to run twice.
CronTask = Callable[[CronDeps], Awaitable[int]]


class CronWorker(Protocol):
    @property
    def cron(self) -> CronDeps: ...


class CronContext(Context, total=False):
    """The jobs worker's saq context, as a tick reads it (`outlive.jobs.deps.JobsContext`)."""

    outlive: Required[CronWorker]
