"""Reading runs: one run, a page of them, one run's timeline, a lease; each one statement."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from outlive.db.models import ACTIVE_STATUSES, RunStatus
from outlive.db.tx import Db
from outlive.errors import BadUserInput
from outlive.ids import RunId, TenantId
from outlive.services.runs import page_queries, queries
from outlive.services.runs.keys import MAX_KEY, check_tags
from outlive.services.runs.records import EventRecord, RunPage, RunRecord, to_event, to_record

MAX_PAGE = 100
MAX_COUNT = 1000  # a runs list's total is counted up to this, then "1,000+"


class RunOrder(StrEnum):
    """The order of a page of runs, by creation (`runs(order:)`)."""

    NEWEST_FIRST = "NEWEST_FIRST"
    OLDEST_FIRST = "OLDEST_FIRST"


MAX_EVENTS_PAGE = 1000


async def read_run(db: Db, tenant_id: TenantId, run_id: RunId) -> RunRecord | None:
    """The tenant's run, or None (another tenant's run reads as missing)."""
    row = await db.one(queries.GET_RUN, run_id=run_id, tenant_id=tenant_id)
    return to_record(row) if row is not None else None


async def lease_left(db: Db, run_id: RunId) -> float | None:
    """For a delivery that could not claim the run: None when the run is settled (or gone),
    waiting for a slot (its admission enqueues it again), or WAITING (its wake does); otherwise
    the seconds left on the lease of the attempt holding it (0 when QUEUED)."""
    row = await db.one(queries.LEASE_LEFT, run_id=run_id)
    if row is None or row["status"] not in ACTIVE_STATUSES or row["status"] == RunStatus.WAITING:
        return None  # settled, or WAITING (its wake hands it to the queue again)
    if row["status"] == RunStatus.QUEUED and row["dispatched_at"] is None:
        return None
    return float(row["left_s"] or 0.0)


async def agent_of(db: Db, run_id: RunId) -> str | None:
    """The agent of a run that is still to be executed (QUEUED or RUNNING); None otherwise."""
    row = await db.one(queries.LEASE_LEFT, run_id=run_id)
    if row is None or row["status"] not in (RunStatus.QUEUED, RunStatus.RUNNING):
        return None
    return str(row["agent"])


async def handed_while_parking(db: Db, run_id: RunId) -> bool:
    """True when the run is QUEUED and admitted: woken, and handed to the queue, while the
    delivery that parked it still held its job (`outlive.jobs.run_instances.after_parking`)."""
    row = await db.one(queries.LEASE_LEFT, run_id=run_id)
    return row is not None and row["status"] == RunStatus.QUEUED and bool(row["dispatched_at"])


async def barren_losses(db: Db, run_id: RunId, *, losing: int | None = None) -> int:
    """How many of the run's lost attempts completed no step since their claim: only those count
    towards `MAX_LOST_ATTEMPTS` (a run that makes progress is never failed for losing workers).
    `losing`: an attempt about to be counted lost, counted too when it completed no step."""
    row = await db.one(queries.BARREN_LOSSES, run_id=run_id, attempt=losing)
    return int(row["barren"]) if row is not None else 0


def encode_cursor(run: RunRecord) -> str:
    raw = f"{run.created_at.isoformat()}|{run.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, run_id = raw.partition("|")
        instant = datetime.fromisoformat(at)
        if instant.tzinfo is None:
            raise ValueError("no offset")
        instant.astimezone(UTC)  # 0001-01-01T00:00+01:00 is before year 1 in UTC
        return instant, UUID(run_id)
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise BadUserInput(f"{cursor!r} is not a valid cursor") from None


async def read_runs(
    db: Db,
    tenant_id: TenantId,
    *,
    first: int,
    after: str | None = None,
    statuses: Sequence[RunStatus] | None = None,
    agent: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    order: RunOrder = RunOrder.NEWEST_FIRST,
    key: str | None = None,
    tags: Sequence[str] | None = None,
    top_level: bool = False,
    paused: bool | None = None,
    schedule_id: UUID | None = None,
) -> RunPage:
    """A page of the tenant's runs in `order` (newest first by default), keyset-paginated on
    (created_at, id): `after` is a run's cursor, and the page holds the runs that come after it
    in that order; with `since` / `until`, only those created in [since, until); with `key`,
    only that key's runs ("": the agents' default key); with `tags`, only runs carrying all; with
    `top_level`, only runs with no parent (child runs left out); with `paused`, only runs held
    (true) or not (false) by a pause or a budget; with `schedule_id`, only that schedule's runs."""
    if not 0 <= first <= MAX_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_PAGE}")
    filters, params = _filters(
        statuses=statuses,
        agent=agent,
        since=since,
        until=until,
        key=key,
        tags=tags,
        top_level=top_level,
        paused=paused,
        schedule_id=schedule_id,
    )
    at, run_id = decode_cursor(after) if after is not None else (None, None)
    rows = await db.all(
        page_queries.RUNS_PAGES[(order is RunOrder.NEWEST_FIRST, filters)],
        tenant_id=tenant_id,
        after_at=at,
        after_id=run_id,
        limit=first + 1,
        **params,
    )
    runs = [to_record(row) for row in rows]
    page = runs[:first]
    return RunPage(
        runs=page, cursors=[encode_cursor(r) for r in page], has_next_page=len(runs) > first
    )


async def count_runs(
    db: Db,
    tenant_id: TenantId,
    *,
    statuses: Sequence[RunStatus] | None = None,
    agent: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    key: str | None = None,
    tags: Sequence[str] | None = None,
    top_level: bool = False,
    paused: bool | None = None,
    schedule_id: UUID | None = None,
) -> int:
    """How many of the tenant's runs match the filters `read_runs` takes (every page), counted
    up to `MAX_COUNT + 1`: more than `MAX_COUNT` reads as `MAX_COUNT + 1` ("1,000+"), so the
    count stays cheap however many runs there are."""
    filters, params = _filters(
        statuses=statuses,
        agent=agent,
        since=since,
        until=until,
        key=key,
        tags=tags,
        top_level=top_level,
        paused=paused,
        schedule_id=schedule_id,
    )
    row = await db.one(
        page_queries.RUNS_COUNTS[filters], tenant_id=tenant_id, cap=MAX_COUNT + 1, **params
    )
    return int(row["n"]) if row is not None else 0


def _filters(
    *,
    statuses: Sequence[RunStatus] | None,
    agent: str | None,
    since: datetime | None,
    until: datetime | None,
    key: str | None,
    tags: Sequence[str] | None,
    top_level: bool,
    paused: bool | None = None,
    schedule_id: UUID | None = None,
) -> tuple[str, dict[str, Any]]:
    """The runs list's filters, checked: the optional filters' text (a key of the statements)
    and the parameters they bind."""
    if key is not None and len(key) > MAX_KEY:
        raise BadUserInput(f"a key is at most {MAX_KEY} characters")
    wanted = list(check_tags(tags))
    if since is not None and until is not None and since >= until:
        raise BadUserInput("createdBefore must be after createdSince")
    filters = page_queries.page_filters(
        key=key is not None,
        tags=bool(wanted),
        top_level=top_level,
        schedule=schedule_id is not None,
    )
    params: dict[str, Any] = {
        "statuses": [s.value for s in statuses] if statuses else None,
        "agent": agent,
        "since": since,
        "until": until,
        "paused": paused,
        **({"key": key} if key is not None else {}),
        **({"tags": wanted} if wanted else {}),
        **({"schedule_id": schedule_id} if schedule_id is not None else {}),
    }
    return filters, params


def check_events_page(first: int) -> None:
    if not 0 <= first <= MAX_EVENTS_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_EVENTS_PAGE}")


async def list_events(
    db: Db, run_id: RunId, *, after: int = 0, first: int = 100
) -> list[EventRecord]:
    """One run's timeline: seq > `after`, ascending, at most `first`."""
    check_events_page(first)
    rows = await db.all(queries.EVENTS, run_id=run_id, after=after, first=first)
    return [to_event(row) for row in rows]
