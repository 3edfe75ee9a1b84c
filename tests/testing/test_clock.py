"""The harness's fake clock moves schedules: a daily schedule fires each of its occurrences in
the span `clock.advance` skips, at its wall time in its zone, and none before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from outlive.testing import Harness
from tests.conftest import make_settings, with_own_database
from tests.support import Servers

pytestmark = pytest.mark.timeout(120)
AGENTS = ["tests.testing.kit_agents:TICK"]
ZONE = "Asia/Kolkata"  # UTC+05:30, no DST: 9:00 there is 03:30 UTC every day
CREATE = """mutation($i: ScheduleInput!) { createSchedule(input: $i) { id nextFireAt } }"""
RUNS = """query($s: ID!) { runs(scheduleId: $s, first: 100) { totalCount
  edges { node { id status scheduledFor } } } }"""


@pytest.fixture
async def harness(servers: Servers) -> AsyncIterator[Harness]:
    own = await with_own_database(servers)
    async with Harness(agents=AGENTS, settings=make_settings(own)) as h:
        yield h


async def test_three_days_start_the_three_daily_occurrences_at_9_in_the_zone(
    harness: Harness,
) -> None:
    made = await _daily(harness)
    after = harness.clock.now()
    await harness.clock.advance(days=3)

    runs = await _runs(harness, made["id"])
    assert [at for at, _, _ in runs] == _nine_oclocks(after, 3)
    assert all(at.astimezone(ZoneInfo(ZONE)).time() == time(9) for at, _, _ in runs)
    assert [status for _, _, status in runs[:2]] == ["SUCCEEDED"] * 2  # done before the next
    assert await harness.result(runs[2][1]) == {"ticked": True}
    schedule = (await harness.gql(ONE, {"id": made["id"]}))["schedule"]
    assert datetime.fromisoformat(schedule["nextFireAt"]) == _nine_oclocks(after, 4)[-1]


async def test_the_clock_short_of_the_fire_time_starts_none_and_past_it_one(
    harness: Harness,
) -> None:
    made = await _daily(harness)
    fire_at = datetime.fromisoformat(made["nextFireAt"])
    await harness.clock.advance(fire_at - harness.clock.now() - timedelta(minutes=1))
    assert await _runs(harness, made["id"]) == []  # less than a day: a minute short of 9:00

    await harness.clock.advance(minutes=2)
    assert [at for at, _, _ in await _runs(harness, made["id"])] == [fire_at]


ONE = "query($id: ID!) { schedule(id: $id) { nextFireAt } }"


async def _daily(harness: Harness) -> dict[str, Any]:
    """A schedule of every day at 9:00 in `ZONE` (REJECT: an occurrence while the last run is
    active is skipped)."""
    spec = {"agent": "tick", "cron": "0 9 * * *", "timezone": ZONE, "input": {}}
    made: dict[str, Any] = (await harness.gql(CREATE, {"i": spec}))["createSchedule"]
    return made


async def _runs(harness: Harness, schedule_id: str) -> list[tuple[datetime, str, str]]:
    """The schedule's runs: (scheduledFor, id, status), oldest first."""
    edges = (await harness.gql(RUNS, {"s": schedule_id}))["runs"]["edges"]
    nodes = [e["node"] for e in edges]
    return sorted((datetime.fromisoformat(n["scheduledFor"]), n["id"], n["status"]) for n in nodes)


def _nine_oclocks(after: datetime, count: int) -> list[datetime]:
    """The first `count` times it is 9:00 in `ZONE` after `after` (zoneinfo, not the cron code)."""
    zone = ZoneInfo(ZONE)
    day = after.astimezone(zone).date()
    found: list[datetime] = []
    while len(found) < count:
        at = datetime.combine(day, time(9), tzinfo=zone)
        if at > after:
            found.append(at)
        day += timedelta(days=1)
    return found
