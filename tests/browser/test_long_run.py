"""A 1,000-step run's page: the Steps tab folds its 1,000 calls of `turn` into one row with their
count, opened a window of steps at a time, the rest a click away; the Events tab is windowed
too. How fast is measured in `bench/console_page.py` (speed is measured in benchmarks, never in
timed tests)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Contexts, assert_accessible
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

TIMES = "\N{MULTIPLICATION SIGN}"  # the sign of a folded row

STEPS = 1000
WINDOW = 200  # EVENTS_WINDOW in web/src/screens/run/events.ts

# Installed before the app loads: notes `performance.now()` (from the start of the navigation)
# when the first step row is drawn and when the heading counts them all. `window.__t0` moves the
# origin to a later moment (a click inside the app).
STEPS_SHOWN_AT = """(total) => {
  window.__t0 = 0;
  const look = () => {
    const now = performance.now();
    const step = document.querySelector('[data-testid="step"], [data-testid="step-group"]');
    if (window.__firstStep === undefined && step) window.__firstStep = now - window.__t0;
    const heading = document.getElementById('steps-heading');
    const counted = heading && heading.textContent.includes(`(${total} completed)`);
    if (window.__allSteps === undefined && counted) window.__allSteps = now - window.__t0;
  };
  new MutationObserver(look).observe(
    document, {subtree: true, childList: true, characterData: true});
}"""


def long_run(stack: Stack, tenant: Tenant, steps: int = STEPS) -> str:
    """A settled demo run of `steps` turns: each a durable step and a `turn` event."""
    run_id = stack.start_run(tenant, turns=steps, delayMs=0)
    assert stack.wait_settled(tenant, run_id, timeout=180) == "SUCCEEDED"
    return run_id


def test_a_thousand_step_run_page_shows_its_steps_a_window_at_a_time(
    contexts: Contexts, tenant: Tenant, sign_in: Callable[..., None], stack: Stack, tmp_path: Path
) -> None:
    page = contexts.page()
    run_id = long_run(stack, tenant)
    page.add_init_script(f"({STEPS_SHOWN_AT})({STEPS})")
    sign_in(page, tenant, f"/runs/{run_id}?tab=steps")
    heading = page.get_by_role("heading", name="Steps")
    expect(heading).to_contain_text(f"({STEPS} completed)", timeout=30_000)
    group = page.get_by_test_id("step-group")
    expect(group).to_have_attribute("data-count", str(STEPS))  # one row for 1,000 calls of turn
    first, counted = page.evaluate("[window.__firstStep, window.__allSteps]")
    assert 0 < first <= counted, (first, counted)  # drawn before (or as) all were counted
    group.get_by_role("button", name=f"turn {TIMES}{STEPS}").click()
    rows = page.get_by_test_id("step")
    expect(rows).to_have_count(WINDOW)
    expect(rows.first).to_be_visible()
    expect(rows.first).to_contain_text("#1")
    expect(page.get_by_text(f"Showing {WINDOW} of {STEPS}.")).to_be_visible()
    shoot(page, "run-steps-1000", tmp_path)
    page.get_by_role("button", name=f"Show {WINDOW} more").click()
    expect(rows).to_have_count(2 * WINDOW)
    assert_accessible(page, "a 1,000-step run's steps")

    page.get_by_role("tab", name="Events").click()
    timeline = page.get_by_role("list", name="Timeline").get_by_role("listitem")
    expect(timeline.first).to_be_visible()
    assert timeline.count() <= WINDOW  # 2,000+ events, drawn a window at a time

    # Opened on the Waterfall (issue 45, item 1): it is drawn from the whole timeline (2,000+
    # events, 5 pages), never from its first page: no band ever says "running", the attempt and
    # the durable steps agree with the API, and the Events tab counts every event.
    events = count_events(stack, tenant, run_id)
    assert events > 2000, events
    fresh = contexts.page()
    fresh.add_init_script(EVER_RUNNING)
    sign_in(fresh, tenant, f"/runs/{run_id}?tab=waterfall")
    band = fresh.locator('li.band[data-attempt="1"]')
    expect(band).to_have_attribute("data-end", "succeeded", timeout=30_000)
    expect(fresh.locator("li.band[data-attempt]")).to_have_count(1)
    expect(band).to_contain_text(f"{STEPS} durable step(s)")
    expect(fresh.get_by_role("tab", name=re.compile("^Events"))).to_have_text(f"Events {events}")
    expect(fresh.get_by_test_id("run-attempt")).to_have_text(re.compile(r"^Attempt 1\b"))
    assert fresh.evaluate("window.__everRunning") is False
    assert_accessible(fresh, "a 1,000-step run's waterfall")


# Installed before the app loads: notes whether a band or the attempt fact ever said "running".
EVER_RUNNING = """(() => {
  window.__everRunning = false;
  new MutationObserver(() => {
    if (document.querySelector('li.band[data-end="running"]')) window.__everRunning = true;
    const fact = document.querySelector('[data-testid="run-attempt"]');
    if (fact && /running/.test(fact.textContent || "")) window.__everRunning = true;
  }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
})()"""


def count_events(stack: Stack, tenant: Tenant, run_id: str) -> int:
    """The run's events, by the API, a page of 1,000 at a time."""
    total, after = 0, 0
    while True:
        page = stack.gql(
            tenant,
            "query($id: ID!, $after: Int!) { run(id: $id) { events(after: $after, first: 1000)"
            " { seq } } }",
            {"id": run_id, "after": after},
        )["run"]["events"]
        total += len(page)
        if len(page) < 1000:
            return total
        after = page[-1]["seq"]
