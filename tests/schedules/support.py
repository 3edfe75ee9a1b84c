"""Helpers of the schedule tests: the GraphQL documents, and the clock driven by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.jobs.run_instances import SaqRunInstances
from outlive.services import sealing
from outlive.services.schedules.fires import fire_due
from tests.support import Api

FIELDS = """id agent cron timezone input key onConflict tags paused jitterSeconds
catchupWindowSeconds nextFireAt lastFireAt"""
CREATE = f"mutation($i: ScheduleInput!) {{ createSchedule(input: $i) {{ {FIELDS} }} }}"
UPDATE = f"""mutation($id: ID!, $i: ScheduleInput!) {{
  updateSchedule(id: $id, input: $i) {{ {FIELDS} }} }}"""
PAUSE = f"mutation($id: ID!) {{ pauseSchedule(id: $id) {{ {FIELDS} }} }}"
RESUME = f"mutation($id: ID!) {{ resumeSchedule(id: $id) {{ {FIELDS} }} }}"
DELETE = "mutation($id: ID!) { deleteSchedule(id: $id) }"
TRIGGER = """mutation($id: ID!) { triggerSchedule(id: $id) {
  created run { id status scheduleId scheduledFor key } } }"""
BACKFILL = """mutation($id: ID!, $f: DateTime!, $t: DateTime!) {
  backfillSchedule(id: $id, from: $f, to: $t) }"""
ONE = f"""query($id: ID!) {{ schedule(id: $id) {{ {FIELDS}
  runs(first: 100) {{ totalCount edges {{ node {{ id scheduledFor }} }} }} }} }}"""
LIST = f"query($after: String) {{ schedules(first: 2, after: $after) {{ {FIELDS} }} }}"
RUNS = """query($s: ID!) { runs(scheduleId: $s, first: 100) { totalCount
  edges { node { id status scheduleId scheduledFor input key } } } }"""


async def create(api: Api, token: str, **fields: Any) -> dict[str, Any]:
    data = await api.gql(CREATE, {"i": {"agent": "demo", "cron": "@hourly", **fields}}, token=token)
    created: dict[str, Any] = data["createSchedule"]
    return created


async def rows(sessions: Sessions, sql: str, **params: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in await sessions.all(text(sql), **params)]


async def rewind(sessions: Sessions, schedule_id: str, seconds: float) -> None:
    """Move a schedule's cursor to its occurrence `seconds` before (negative: after) the current
    minute: what the clock finds when it comes back from an outage."""
    await sessions.all(
        text(
            "UPDATE schedules SET next_occurrence = date_trunc('minute', now())"
            " - make_interval(secs => :s), next_fire_at = date_trunc('minute', now())"
            " - make_interval(secs => :s) WHERE id = :id RETURNING id"
        ),
        id=schedule_id,
        s=seconds,
    )


@asynccontextmanager
async def clock(settings: Settings) -> AsyncIterator[Any]:
    """`fire(sessions)`: one pass of the relay's clock, as a worker's relay makes it."""
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE)
    instances = SaqRunInstances(queue, settings)

    async def fire(sessions: Sessions, batch: int = 200) -> int:
        return await fire_due(sessions, instances, batch, kek=sealing.kek_of(settings))

    try:
        yield fire
    finally:
        await queue.disconnect()
