"""A schedule's occurrences against a `zoneinfo` reference over a year, on a fake clock.

The reference walks every ten UTC minutes of 2026, reads each on the zone's wall clock and keeps
it when the wall time matches the expression and is its first instant (`fold == 0`: the second
pass of a repeated hour already ran; a skipped hour has no minute to match). The clock under test
is driven the way the relay drives it, cursor after cursor (`next_after`), never looking at the
real time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4
from zoneinfo import ZoneInfo

import pytest

from outlive.errors import BadUserInput
from outlive.services.schedules import cron

YEAR = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
# expression -> (minutes, hours, weekdays (Monday 0)) it matches
EXPRESSIONS = {
    "30 2 * * *": ({30}, {2}, set(range(7))),  # inside both transitions' hour (Paris)
    "0 * * * *": ({0}, set(range(24)), set(range(7))),
    "*/20 1-3 * * *": ({0, 20, 40}, {1, 2, 3}, set(range(7))),  # around 01:00-03:00
    "0 9 * * 1-5": ({0}, {9}, set(range(5))),
}


def reference(zone: ZoneInfo) -> dict[str, list[datetime]]:
    """Each expression's occurrences, from one walk over the year's minutes."""
    found: dict[str, list[datetime]] = {e: [] for e in EXPRESSIONS}
    at = YEAR[0]
    while at < YEAR[1]:
        wall = at.astimezone(zone)
        if wall.fold == 0:
            for expression, (minutes, hours, weekdays) in EXPRESSIONS.items():
                if wall.minute in minutes and wall.hour in hours and wall.weekday() in weekdays:
                    found[expression].append(at)
        at += timedelta(minutes=10)  # every expression's minutes are tens, every offset hours
    return found


def clock(zone: ZoneInfo, expression: str) -> list[datetime]:
    """The occurrences the relay would fire, cursor after cursor, on a fake clock."""
    checked = cron.check_cron(expression)
    fired, cursor = [], cron.next_after(checked, zone, YEAR[0] - timedelta(microseconds=1))
    while cursor < YEAR[1]:
        fired.append(cursor)
        cursor = cron.next_after(checked, zone, cursor)
    return fired


@pytest.mark.parametrize("zone_name", ["Europe/Paris", "America/New_York"])
def test_a_year_of_occurrences_matches_zoneinfo_across_both_transitions(zone_name: str) -> None:
    zone = ZoneInfo(zone_name)
    expected = reference(zone)
    for expression in EXPRESSIONS:
        assert clock(zone, expression) == expected[expression], (zone_name, expression)
    daily = clock(zone, "30 2 * * *")
    days = {at.astimezone(zone).date() for at in daily}
    assert len(daily) == len(days) == 364  # the day clocks go forward has no 02:30; one each
    hourly = clock(zone, "0 * * * *")
    assert len(hourly) == 365 * 24 - 1  # the hour skipped in spring; the repeated one runs once


def test_the_repeated_hour_runs_once_and_the_skipped_hour_not_at_all() -> None:
    paris = ZoneInfo("Europe/Paris")
    autumn = cron.between(
        "*/30 * * * *",
        paris,
        datetime(2026, 10, 24, 23, tzinfo=UTC),
        datetime(2026, 10, 25, 3, tzinfo=UTC),
        limit=50,
    )
    walls = [a.astimezone(paris).strftime("%H:%M") for a in autumn]
    assert walls == ["01:00", "01:30", "02:00", "02:30", "03:00", "03:30"]
    spring = cron.between(
        "30 2 * * *",
        paris,
        datetime(2026, 3, 28, tzinfo=UTC),
        datetime(2026, 3, 31, tzinfo=UTC),
        limit=50,
    )
    assert [a.astimezone(paris).day for a in spring] == [28, 30]


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("* * * *", "expected 5 fields"),
        ("*/5 * * * * *", "expected 5 fields"),
        ("61 * * * *", "61"),
        ("0 25 * * *", "25"),
        ("bogus", "expected 5 fields"),
        ("@every_minute", "expected 5 fields"),
    ],
)
def test_a_bad_cron_says_what_is_wrong(expression: str, says: str) -> None:
    with pytest.raises(BadUserInput) as bad:
        cron.check_cron(expression)
    assert says in bad.value.message
    assert repr(expression) in bad.value.message


def test_aliases_and_zones() -> None:
    assert cron.check_cron("@daily") == "0 0 * * *"
    assert cron.check_cron(" 0  9 * * 1-5 ") == "0 9 * * 1-5"
    for bad in ("Mars/Olympus", "", "../etc/passwd", "europe/paris "):
        with pytest.raises(BadUserInput):
            cron.check_timezone(bad)
    assert cron.check_timezone("America/New_York").key == "America/New_York"


def test_jitter_is_fixed_per_occurrence_and_within_bounds() -> None:
    schedule, at = uuid4(), datetime(2026, 5, 1, 8, tzinfo=UTC)
    delays = {cron.jitter(schedule, at + timedelta(hours=h), 60) for h in range(200)}
    assert all(timedelta(0) <= d < timedelta(seconds=60) for d in delays)
    assert len(delays) > 150  # spread, not one value
    assert cron.jitter(schedule, at, 60) == cron.jitter(schedule, at, 60)
    assert cron.jitter(schedule, at, 0) == timedelta(0)
    assert cron.smallest_interval_s("*/5 * * * *") == 300
    assert cron.smallest_interval_s("0 9 * * 1-5") == 86400
