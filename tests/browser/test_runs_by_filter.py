"""The runs list acts on every run its filters match, not only the ticked rows of one page: "Cancel
all matching…" counts on the server first, asks (with a reason), then shows the bulk cancel's
progress live, stopped mid-way by Stop (the runs it had not reached stay as they were), and links
to the Replays page, which lists it; "Replay failed matching…" replays a filter's failed runs the
same way, to the end. axe-core on the question and the progress, in both themes, at 1440 and
390 px."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
from playwright.sync_api import Page, expect

from tests.browser.stack import Stack, Tenant, _asyncpg_dsn, run_async
from tests.browser.test_runs_bulk import _axe_both, _sql
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]


def _statuses(stack: Stack, tenant: Tenant, tag: str) -> dict[str, int]:
    async def read() -> dict[str, int]:
        conn = await asyncpg.connect(_asyncpg_dsn(stack.database_url))
        try:
            rows = await conn.fetch(
                "SELECT status, count(*) AS n FROM runs WHERE tenant_id = $1::uuid"
                " AND $2 = ANY(tags) GROUP BY status",
                tenant.id,
                tag,
            )
        finally:
            await conn.close()
        return {r["status"]: r["n"] for r in rows}

    return run_async(read())


def _reasons(stack: Stack, tenant: Tenant) -> set[str]:
    async def read() -> set[str]:
        conn = await asyncpg.connect(_asyncpg_dsn(stack.database_url))
        try:
            rows = await conn.fetch(
                "SELECT DISTINCT e.data::text AS d FROM run_events e JOIN runs r ON r.id = e.run_id"
                " WHERE r.tenant_id = $1::uuid AND e.type = 'cancelled'",
                tenant.id,
            )
        finally:
            await conn.close()
        return {r["d"] for r in rows}

    return run_async(read())


def test_cancel_all_matching_counts_asks_shows_progress_and_stops_then_replay_failed_matching(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    # a bad deploy's 300 runs, parked on a signal (no worker holds them), and two runs it spared
    _sql(
        stack,
        "INSERT INTO runs (tenant_id, agent, input, status, key, tags, waiting_for, created_at)"
        " SELECT $1::uuid, 'demo', '{}'::jsonb, 'WAITING', 'bad-' || i, $2::text[], 'approval',"
        " now() - interval '1 hour' + i * interval '1 second' FROM generate_series(1, 300) i",
        tenant.id,
        ["deploy:42"],
    )
    _sql(
        stack,
        "INSERT INTO runs (tenant_id, agent, input, status, key, tags, waiting_for, created_at)"
        " SELECT $1::uuid, 'demo', '{}'::jsonb, 'WAITING', 'good-' || i, $2::text[], 'approval',"
        " now() - interval '1 hour' FROM generate_series(1, 2) i",
        tenant.id,
        ["deploy:41"],
    )

    sign_in(page, tenant, "/runs?tag=deploy%3A42")
    expect(page.get_by_test_id("runs-total")).to_have_text("300 runs")
    matching = page.get_by_role("region", name="Every matching run")
    matching.get_by_role("button", name="Cancel all matching…").click()
    ask = matching.get_by_test_id("by-filter-ask")
    expect(ask).to_be_focused()
    expect(ask).to_contain_text(
        "Cancel 300 runs matching these filters (queued, running or waiting)?"
    )
    _axe_both(page, "runs with a cancel of every matching run asked")
    ask.get_by_label(re.compile("Reason")).fill("bad deploy 42")
    ask.get_by_role("button", name="Yes, cancel 300 runs").click()

    progress = matching.get_by_test_id("by-filter-progress")
    counts = progress.get_by_test_id("by-filter-counts")
    # 50 a second: the first tick's runs are cancelled, then Stop before the last
    expect(counts).to_contain_text(re.compile(r"[1-9]\d* cancelled"), timeout=20_000)
    progress.get_by_role("button", name="Stop").click()
    expect(progress.get_by_test_id("by-filter-status")).to_have_text("CANCELLED")
    expect(progress.get_by_role("button", name="Stop")).to_have_count(0)
    shown = re.search(r"(\d+) cancelled", counts.inner_text())
    assert shown is not None
    cancelled = int(shown.group(1))
    assert 0 < cancelled < 300
    # exactly what it says it cancelled; the rest, and the spared deploy, as they were
    assert _statuses(stack, tenant, "deploy:42") == {
        "CANCELLED": cancelled,
        "WAITING": 300 - cancelled,
    }
    assert _statuses(stack, tenant, "deploy:41") == {"WAITING": 2}
    (said,) = _reasons(stack, tenant)
    assert "bad deploy 42" in said  # the reason
    assert '"by": "owner@' in said  # and who asked
    _axe_both(page, "runs with a bulk cancel's progress")
    shoot(page, "runs-by-filter", tmp_path)

    # the progress page lists it, by kind
    progress.get_by_role("link", name=re.compile("on the Replays page")).click()
    expect(page).to_have_url(re.compile(r"/replays$"))
    card = page.get_by_role("listitem", name=re.compile("^Bulk cancel "))
    expect(card.get_by_test_id("replay-status")).to_have_text("CANCELLED")
    expect(card.get_by_test_id("replay-counts")).to_contain_text(f"{cancelled} cancelled")
    expect(card).to_contain_text("bad deploy 42")

    # and the failed runs of another filter, replayed to the end (retry of failed runs by filter)
    _sql(
        stack,
        "INSERT INTO runs (tenant_id, agent, input, status, key, tags, created_at, finished_at)"
        " SELECT $1::uuid, 'demo', '{\"turns\": 1, \"delayMs\": 0}'::jsonb, 'FAILED', 're-' || i,"
        " $2::text[], now() - interval '1 hour', now() - interval '1 hour'"
        " FROM generate_series(1, 3) i",
        tenant.id,
        ["nightly"],
    )
    page.goto("/runs?tag=nightly")
    expect(page.get_by_test_id("runs-total")).to_have_text("3 runs")
    matching.get_by_role("button", name="Replay failed matching…").click()
    expect(ask).to_contain_text("Replay 3 runs matching these filters (failed) from the start")
    ask.get_by_role("button", name="Yes, replay 3 runs").click()
    expect(progress.get_by_test_id("by-filter-status")).to_have_text("DONE", timeout=30_000)
    expect(counts).to_have_text("3 of 3 processed (100%) · 3 started · 0 skipped")
    # a list of settled runs offers no cancel; one of active runs no replay
    page.goto("/runs?tag=nightly&status=FAILED")
    expect(matching.get_by_role("button", name="Replay failed matching…")).to_be_visible()
    expect(matching.get_by_role("button", name="Cancel all matching…")).to_have_count(0)
