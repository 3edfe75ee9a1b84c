"""Approvals with their context (issue 45, item 2): the inbox row shows the run's key, tags and
input; the nav counts the runs awaiting a person and follows them without a reload; a WAITING row
in the runs list says whether it waits for a person or sleeps, and until when. axe-core in both
themes at 1440 and 390 px, no sideways scrolling at 390 px."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]


def start(stack: Stack, tenant: Tenant, key: str, tags: list[str], **input: object) -> str:
    data = stack.gql(
        tenant,
        "mutation($input: StartRunInput!) { startRun(input: $input) { run { id } } }",
        {"input": {"agent": "demo", "key": key, "tags": tags, "input": input}},
    )
    run_id: str = data["startRun"]["run"]["id"]
    return run_id


def waiting_for(stack: Stack, tenant: Tenant, run_id: str) -> object:
    query = "query($id: ID!) { run(id: $id) { status waitingFor } }"
    return stack.gql(tenant, query, {"id": run_id})["run"]


def test_the_inbox_shows_context_and_the_nav_counts(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    refund = start(
        stack, tenant, "refund-1042", ["user:7"], turns=1, delayMs=0, awaitSignal="approval"
    )
    sleeper = start(stack, tenant, "nightly", [], turns=2, delayMs=0, pauseMs=600_000)
    sign_in(page, tenant, "/runs")
    count = page.get_by_test_id("awaiting-count")
    expect(count).to_have_text(re.compile(r"^\W*1\W*waiting$"), timeout=30_000)
    expect(page.locator(f'tr[data-run-id="{refund}"] [data-testid="waiting-short"]')).to_have_text(
        "for approval"
    )
    expect(page.locator(f'tr[data-run-id="{sleeper}"] [data-testid="waiting-short"]')).to_have_text(
        re.compile(r"^\s*sleeping until \d"), timeout=30_000
    )
    check_screen(page, "runs with waiting rows")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Awaiting input").click()
    row = page.locator(f'tr[data-run-id="{refund}"]')
    expect(row.get_by_test_id("inbox-key")).to_have_text("refund-1042")
    expect(row.get_by_label("Tags")).to_have_text("user:7")
    expect(row.get_by_test_id("inbox-input")).to_contain_text('"awaitSignal":"approval"')
    expect(page.locator(f'tr[data-run-id="{sleeper}"]')).to_have_count(0)  # sleeps: no person
    check_screen(page, "inbox with context")
    shoot(page, "awaiting-context", tmp_path)

    # approving empties the count without a reload
    page.evaluate("() => { window.__noReload = true; }")
    row.get_by_role("button", name="Approve").click()
    expect(row.get_by_test_id("approval-outcome")).to_have_attribute("data-decision", "approved")
    expect(count).to_have_count(0, timeout=30_000)
    assert page.evaluate("window.__noReload") is True
    assert stack.wait_settled(tenant, refund) == "SUCCEEDED"
    stack.gql(tenant, "mutation($id: ID!) { cancelRun(id: $id) { id } }", {"id": sleeper})
