"""A schedule's occurrences: its cron expression read in its IANA time zone, DST done right.

The expression (5 fields, or @hourly / @daily / @weekly / @monthly; parsed by `croniter`) is
matched against the wall clock of the zone (`Fields.next_wall` walks naive wall times, by day,
hour and minute: microseconds a fire, where croniter's own walk took a millisecond). Each wall
time it
yields is placed in the zone with `zoneinfo`: a wall time that does not exist that day (the hour
skipped when clocks go forward) is skipped; one that happens twice (the hour repeated when they go
back) runs once, at its first instant (`fold=0`). So "30 2 * * *" in Europe/Paris does not run on
the last Sunday of March and runs once on the last Sunday of October; "*/15 * * * *" does not run
during the repeated hour (every wall time of it already ran). A schedule that must tick at a steady
real-time interval uses the zone "UTC".

Jitter delays each occurrence by a fixed amount in [0, jitterSeconds) derived from the schedule
and the occurrence (a hash): the same on every worker and after every restart, so a fire time never
moves once computed and schedules made at the same minute do not all fire in the same second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter
from croniter.croniter import CroniterError

from outlive.errors import BadUserInput

ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
}
FIELDS = "minute hour day-of-month month day-of-week"
SAMPLE = 1000  # occurrences looked at for a schedule's smallest interval
MAX_JITTER_S = 3600
# croniter walks naive wall times: a naive start, on purpose (the zone is applied after).
_WALL_START = datetime(2026, 1, 1, tzinfo=UTC).replace(tzinfo=None)
_MINUTE, _HOUR, _DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
_SAMPLE_SPAN = timedelta(days=400)
_MAX_DAYS = 366 * 8  # a 29 February on a given weekday can take years to come


@lru_cache(maxsize=4096)
def check_cron(expression: str) -> str:
    """The expression as croniter reads it (an alias expanded), or `BadUserInput` saying why.
    Cached: the clock reads each schedule's expression at every fire."""
    text = " ".join(str(expression).split())
    if text.lower() in ALIASES:
        return ALIASES[text.lower()]
    fields = text.split(" ")
    if len(fields) != 5:
        raise BadUserInput(
            f"cron {expression!r}: expected 5 fields ({FIELDS}) or one of"
            f" {', '.join(ALIASES)}, got {len(fields) if text else 0} field(s)"
        )
    try:
        expanded = croniter(text, _WALL_START).expanded
    except (CroniterError, ValueError, KeyError) as exc:
        raise BadUserInput(f"cron {expression!r}: {exc}") from None
    except Exception:  # noqa: BLE001 (croniter's parser on odd input: whatever it raises)
        raise BadUserInput(f"cron {expression!r} is not a valid expression ({FIELDS})") from None
    plain = all(v == "*" or isinstance(v, int) for field in expanded for v in field)
    if "#" in text or not plain:
        raise BadUserInput(f"cron {expression!r}: L and # are not supported ({FIELDS})")
    return text


@dataclass(frozen=True, slots=True)
class Fields:
    """A 5-field expression, expanded (croniter parses it): each field's values, None for any.
    Day of month and day of week both restricted: a day matching either (cron's rule)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int] | None
    months: frozenset[int] | None
    weekdays: frozenset[int] | None  # 0 = Sunday

    def day_matches(self, day: datetime) -> bool:
        if self.months is not None and day.month not in self.months:
            return False
        dom = self.days is None or day.day in self.days
        dow = self.weekdays is None or (day.weekday() + 1) % 7 in self.weekdays
        if self.days is not None and self.weekdays is not None:
            return dom or dow
        return dom and dow

    def next_wall(self, after: datetime) -> datetime:
        """The first matching naive wall time strictly after `after` (naive)."""
        at = after.replace(second=0, microsecond=0) + _MINUTE
        for _ in range(_MAX_DAYS * 24):
            if not self.day_matches(at):
                at = at.replace(hour=0, minute=0) + _DAY
                continue
            hour = next((h for h in self.hours if h >= at.hour), None)
            if hour is None:
                at = at.replace(hour=0, minute=0) + _DAY
                continue
            if hour > at.hour:
                at = at.replace(hour=hour, minute=0)
            minute = next((m for m in self.minutes if m >= at.minute), None)
            if minute is not None:
                return at.replace(minute=minute)
            at = at.replace(minute=0) + _HOUR
        raise BadUserInput("this cron expression never fires")


@lru_cache(maxsize=4096)
def fields(expression: str) -> Fields:
    """The expanded fields of a checked expression (`check_cron`), parsed once per process."""
    minutes, hours, days, months, weekdays = croniter(check_cron(expression), _WALL_START).expanded

    def values(field: list[Any]) -> frozenset[int] | None:
        return None if field == ["*"] else frozenset(int(v) for v in field)

    return Fields(
        minutes=tuple(range(60)) if minutes == ["*"] else tuple(sorted(minutes)),
        hours=tuple(range(24)) if hours == ["*"] else tuple(sorted(hours)),
        days=values(days),
        months=values(months),
        weekdays=values(weekdays),
    )


def check_timezone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or `BadUserInput`."""
    if not isinstance(name, str) or (name not in _zones() and name != "UTC"):
        raise BadUserInput(f"timezone {name!r} is not an IANA time zone name (e.g. Europe/Paris)")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadUserInput(
            f"timezone {name!r} is not an IANA time zone name (e.g. Europe/Paris)"
        ) from None
    return zone


_ZONES: set[str] = set()


def _zones() -> set[str]:
    if not _ZONES:
        _ZONES.update(available_timezones())
    return _ZONES


def occurrences(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """The occurrences (UTC) strictly after `after` (aware), in order, without end."""
    after = after.astimezone(UTC)
    match = fields(expression)
    wall = after.astimezone(zone).replace(tzinfo=None)
    while True:
        wall = match.next_wall(wall)
        first = wall.replace(tzinfo=zone, fold=0)
        at = first.astimezone(UTC)
        if at.astimezone(zone).replace(tzinfo=None) != wall:
            continue  # that wall time does not exist that day (clocks went forward)
        if at > after:
            yield at


def next_after(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    return next(occurrences(expression, zone, after))


def between(
    expression: str, zone: ZoneInfo, start: datetime, end: datetime, *, limit: int
) -> list[datetime]:
    """The occurrences in [start, end), at most `limit` + 1 (the caller refuses more)."""
    found: list[datetime] = []
    for at in occurrences(expression, zone, start - timedelta(microseconds=1)):
        if at >= end or len(found) > limit:
            break
        found.append(at)
    return found


def smallest_interval_s(expression: str) -> float:
    """The smallest gap between two of its occurrences (wall clock, over `SAMPLE` of them)."""
    match = fields(expression)
    first = previous = match.next_wall(_WALL_START)
    smallest = float("inf")
    for _ in range(SAMPLE):
        if previous - first > _SAMPLE_SPAN:  # rare expressions (29 February): enough seen
            break
        at = match.next_wall(previous)
        smallest = min(smallest, (at - previous).total_seconds())
        previous = at
        if smallest <= 60:
            break
    return smallest


def jitter(schedule_id: UUID, occurrence: datetime, seconds: int) -> timedelta:
    """The fixed delay of this occurrence of this schedule, in [0, `seconds`)."""
    if seconds <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{schedule_id}/{occurrence.isoformat()}".encode(), digest_size=8)
    return timedelta(milliseconds=int.from_bytes(digest.digest(), "big") % (seconds * 1000))
