"""What a cron task receives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import Redis

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
