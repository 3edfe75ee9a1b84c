"""The Schedules screen (issue 44; issue 45, item 11): the form refuses what needs no server
(no agent) and shows what the server refuses (a cron it cannot read) beside it; a schedule
added there is listed with its cron, zone, next fire and overlap policy; Run now starts a run
and links to it; Pause marks it PAUSED with no next fire and Resume brings the next fire back;
Delete asks, then removes it and its runs stay. The list follows schedule.updated nudges: a
schedule made through the API shows without a reload. axe-core in both themes at 1440 and
390 px, no sideways scrolling at 390 px."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]
CREATE = "mutation($i: ScheduleInput!) { createSchedule(input: $i) { id } }"


def test_schedules_are_added_run_paused_resumed_and_deleted_from_the_console(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    sign_in(page, tenant, "/schedules")
    expect(page.get_by_text("No schedules: runs start only when asked.")).to_be_visible()

    form = page.get_by_role("form", name="Add a schedule")
    form.get_by_role("button", name="Add schedule").click()  # no agent picked
    expect(form.get_by_label("Agent")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Agent").select_option("demo")
    form.get_by_label("Cron").fill("61 * * * *")  # five fields, but minute 61: the server says
    form.get_by_role("button", name="Add schedule").click()
    expect(form.get_by_role("alert")).to_contain_text("61")
    form.get_by_label("Cron").fill("*/5 * * * *")
    form.get_by_label("Time zone").fill("Europe/Paris")
    form.get_by_label("Input (JSON)").fill('{"turns": 1, "delayMs": 0}')
    form.get_by_role("button", name="Add schedule").click()
    expect(form.get_by_role("status")).to_contain_text("Added: demo at */5 * * * * (Europe/Paris)")

    row = page.locator("tr[data-schedule-id]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("*/5 * * * *")
    expect(row).to_contain_text("Europe/Paris")
    expect(row).to_contain_text("Skip while the last run is active")
    expect(row.get_by_test_id("schedule-next")).to_contain_text("in ")
    check_screen(page, "schedules")
    shoot(page, "schedules", tmp_path)

    row.get_by_role("button", name="Run now").click()
    outcome = row.get_by_test_id("schedule-outcome")
    expect(outcome).to_contain_text("Started")
    run_link = outcome.get_by_role("link")
    run_id = stack.gql(tenant, "{ runs(first: 1) { edges { node { id scheduleId } } } }")["runs"][
        "edges"
    ][0]["node"]
    expect(run_link).to_have_attribute("href", f"/runs/{run_id['id']}")

    row.get_by_role("button", name="Pause").click()
    expect(row.get_by_test_id("schedule-paused")).to_have_text("PAUSED")
    expect(row.get_by_test_id("schedule-next")).to_have_text("paused")
    row.get_by_role("button", name="Resume").click()
    expect(row.get_by_test_id("schedule-paused")).to_have_count(0)
    expect(row.get_by_test_id("schedule-next")).to_contain_text("in ")

    # made elsewhere (the API): the list follows the nudge, no reload
    page.evaluate("() => { window.__noReload = true; }")
    spec = {"agent": "demo", "cron": "@daily", "timezone": "UTC"}
    stack.gql(tenant, CREATE, {"i": spec})
    expect(page.locator("tr[data-schedule-id]")).to_have_count(2)
    assert page.evaluate("() => window.__noReload") is True

    first = page.locator("tr[data-schedule-id]").first
    first.get_by_role("button", name="Delete…").click()
    first.get_by_role("button", name="Yes, delete it").click()
    expect(page.locator("tr[data-schedule-id]")).to_have_count(1)
    runs = stack.gql(tenant, "{ runs(first: 5) { edges { node { id } } } }")["runs"]["edges"]
    assert [r["node"]["id"] for r in runs] == [run_id["id"]]  # its runs stay
