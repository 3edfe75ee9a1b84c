"""The Steps tab reads as one row per step (issue 45, item 4): a run that failed once (retried),
then recorded three turns and failed for good shows its two failures where they happened, the
three calls of `turn` folded into one row with their count, a search and a status filter ("Jump
to the 2 failures"), and a side panel for a step: its attempt, its model usage and what it
returned, read from the API. axe-core in both themes at 1440 and 390 px, no sideways scrolling."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

TIMES = "\N{MULTIPLICATION SIGN}"  # the sign of a folded row

SignIn = Callable[..., None]


def test_steps_fold_repeated_calls_show_failures_and_open_in_a_side_panel(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    run_id = stack.start_run(
        tenant,
        turns=4,
        delayMs=0,
        flakyAttempts=1,  # attempt 1 fails at turn 1 (retryable): the run is tried again
        failAtTurn=4,  # attempt 2 records turns 1 to 3, then fails for good
        usagePerTurn={"inputTokens": 10, "outputTokens": 5},
    )
    assert stack.wait_settled(tenant, run_id) == "FAILED"
    sign_in(page, tenant, f"/runs/{run_id}?tab=steps")
    table = page.get_by_role("table", name="Steps")
    group = table.get_by_test_id("step-group")
    expect(group).to_contain_text(f"turn {TIMES}3")
    expect(group).to_have_attribute("data-count", "3")
    failures = table.get_by_test_id("step-failure")
    expect(failures).to_have_count(2)
    expect(failures.nth(0)).to_contain_text("Attempt 1 failed: the run was tried again")
    expect(failures.nth(0)).to_contain_text("flaky fault at turn 1")
    expect(failures.nth(1)).to_contain_text("Attempt 2 failed: the run failed")
    expect(failures.nth(1)).to_contain_text("failing at turn 4 as asked")
    expect(table.get_by_test_id("step")).to_have_count(0)  # folded
    # the first failure came before the turns, the last after them
    order = table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.testid)")
    assert order == ["step-failure", "step-group", "step-failure"], order

    page.get_by_role("button", name="Jump to the 2 failures").click()
    expect(page.get_by_label("Show")).to_have_value("failed")
    expect(failures).to_have_count(2)
    expect(group).to_have_count(0)
    page.get_by_label("Show").select_option("all")
    page.get_by_label("Search steps").fill("no such step")
    expect(page.get_by_text("No step matches.")).to_be_visible()
    page.get_by_label("Search steps").fill("")

    group.get_by_role("button", name=f"turn {TIMES}3").click()
    steps = table.get_by_test_id("step")
    expect(steps).to_have_count(3)
    expect(steps.nth(0)).to_contain_text("1 turn · 15 tokens")  # its event and usage, folded in
    expect(steps.nth(0).locator("td").nth(2)).to_have_text("2")  # recorded by attempt 2
    check_screen(page, "run steps")

    steps.nth(1).get_by_role("button", name="turn").click()
    panel = page.get_by_test_id("step-panel")
    heading = panel.get_by_role("heading", level=3)
    expect(heading).to_have_text("Step turn #2")
    expect(heading).to_be_focused()
    expect(panel.get_by_test_id("step-usage")).to_contain_text("1 request(s) on demo: 10 in, 5 out")
    expect(panel.get_by_test_id("step-result")).to_have_text("2")  # turn 2 returned its number
    check_screen(page, "run steps (a step opened)")
    shoot(page, "run-steps-panel", tmp_path)
    panel.get_by_role("button", name="Close").click()
    expect(panel).to_have_count(0)
