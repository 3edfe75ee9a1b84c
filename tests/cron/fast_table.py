"""A cron table that ticks every two seconds (croniter's sixth field is seconds), for tests."""

from __future__ import annotations

import os

from outlive.cron.deps import CronDeps, CronTask


async def count_tick(deps: CronDeps) -> int:
    key = f"outlive:test:fasttick:{deps.tick}"
    count = int(await deps.redis.incr(key))
    await deps.redis.expire(key, 600)
    await deps.redis.publish("outlive:test:fasttick", f"{deps.tick} {os.getpid()} {count}")
    return count


CRON: dict[str, list[CronTask]] = {"* * * * * */2": [count_tick]}
