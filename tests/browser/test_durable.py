"""Durable waits and signals on the run page: a demo run waiting for `approval` shows WAITING, what
it waits for and until when, its steps and its wait in the waterfall; Approve resumes it and it
settles SUCCEEDED with the signal's payload. The signal form checks its JSON before sending, and
says so when a send is not accepted.

With `OUTLIVE_SCREENSHOTS=docs/screenshots` the waiting run's page is written for the README."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import assert_accessible
from tests.browser.stack import Stack, Tenant
from tests.browser.test_runs import WATCH_STATUS
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]


def events_of(stack: Stack, tenant: Tenant, run_id: str) -> list[str]:
    data = stack.gql(tenant, "query($id: ID!) { run(id: $id) { events { type } } }", {"id": run_id})
    return [e["type"] for e in data["run"]["events"]]


def test_approve_a_run_waiting_for_approval(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    sign_in(page, tenant, "/runs")
    run_id = stack.start_run(tenant, turns=2, delayMs=0, awaitSignal="approval")
    page.goto(f"/runs/{run_id}")
    page.evaluate(WATCH_STATUS)

    status = page.get_by_test_id("run-status")
    expect(status).to_have_text("WAITING", timeout=30_000)
    expect(status).to_have_class("badge badge-waiting")  # the one WAITING colour
    why = page.get_by_role("list", name="Why it is here")
    expect(why).to_contain_text("Waiting for the signal approval until")
    expect(why.locator("code").first).to_have_text("approval")
    expect(why).to_contain_text("(in 60 min)")  # signalTimeoutS defaults to an hour
    assert_accessible(page, "run page (waiting for approval)")
    page.get_by_role("tab", name="Steps").click()
    steps = page.get_by_role("table", name="Steps").get_by_test_id("step")
    expect(steps).to_have_count(2)
    expect(steps.nth(0)).to_contain_text("turn")
    page.get_by_role("tab", name="Waterfall").click()
    waits = page.get_by_role("list", name="Waterfall").locator('li[data-end="wait"]')
    expect(waits).to_have_count(1)
    expect(waits.first).to_contain_text("still waiting")
    expect(waits.first).to_contain_text("Waiting for approval")
    page.get_by_role("tab", name="Overview").click()
    page.emulate_media(color_scheme="light")
    page.get_by_role("heading", name="Why it is here").scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, -16)")
    shoot(page, "run-waiting", tmp_path)  # docs/screenshots only with OUTLIVE_SCREENSHOTS
    assert stack.run_status(run_id) == "WAITING"  # the row agrees with the page

    approval = page.get_by_role("group", name="Approval")
    approval.get_by_role("button", name="Approve").click()
    expect(status).to_have_text("SUCCEEDED", timeout=30_000)
    outcome = approval.get_by_test_id("approval-outcome")
    # resumed from the wait, never retried: the count says so
    expect(page.get_by_test_id("run-attempt")).to_have_text("Attempt 1 of 3, resumed once")
    expect(page.get_by_role("button", name="Run again", exact=True)).to_be_visible()
    expect(outcome).to_have_attribute("data-decision", "approved")
    # the buttons went with the wait: the answer, next to where they were, has the focus
    expect(approval.get_by_role("button")).to_have_count(0)
    expect(outcome).to_be_focused()
    received = page.get_by_role("table", name="Signals received").get_by_test_id("signal-received")
    expect(received).to_have_count(1)
    expect(received).to_contain_text('{"approved":true}')
    expect(received).to_contain_text(f"owner@{tenant.slug}.test")  # who sent it
    expect(page.get_by_label("Output")).to_contain_text('"approved": true')
    page.get_by_role("tab", name="Waterfall").click()
    expect(waits.first).to_have_attribute("data-by", "signal")
    expect(waits.first).to_contain_text("woken by a signal")
    page.get_by_role("tab", name="Steps").click()  # settled: the two calls of turn fold in one row
    folded = page.get_by_role("table", name="Steps").get_by_test_id("step-group")
    expect(folded).to_have_attribute("data-count", "2")  # ran once: the resume replayed none
    statuses = page.evaluate("window.__statuses")
    assert statuses.index("WAITING") < statuses.index("SUCCEEDED"), statuses
    assert page.evaluate("window.__noReload") is True

    data = stack.gql(tenant, "query($id: ID!) { run(id: $id) { output } }", {"id": run_id})
    assert data["run"]["output"] == {"turns": 2, "signal": {"approved": True}, "timedOut": False}
    types = events_of(stack, tenant, run_id)
    assert types.count("signal") == 1, types
    assert types.count("step") == 2, types


def test_the_signal_form_checks_json_and_says_when_not_accepted(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    sign_in(page, tenant, "/runs")
    run_id = stack.start_run(tenant, turns=1, delayMs=0, awaitSignal="approval")
    page.goto(f"/runs/{run_id}")
    expect(page.get_by_test_id("run-status")).to_have_text("WAITING", timeout=30_000)

    # folded under Approve / Reject while the run waits for approval
    page.get_by_text("Send the signal approval (or another)").click()
    form = page.get_by_role("form", name="Send a signal")
    form.get_by_label("Name").fill("note")
    form.get_by_label("Payload (JSON)").fill("{approved: yes}")
    form.get_by_role("button", name="Send signal").click()
    expect(form.get_by_role("alert")).to_contain_text("The payload is not valid JSON")
    expect(form.get_by_label("Payload (JSON)")).to_have_attribute("aria-invalid", "true")
    assert "signal" not in events_of(stack, tenant, run_id)  # nothing was sent

    # a signal of another name is kept in the mailbox (accepted), the run still waits for approval
    form.get_by_label("Payload (JSON)").fill('{"text": "hello"}')
    form.get_by_label("Idempotency key (optional)").fill("k-1")
    form.get_by_role("button", name="Send signal").click()
    outcome = page.get_by_test_id("signal-outcome")
    expect(outcome).to_have_attribute("data-accepted", "true")
    expect(outcome).to_contain_text("note")
    # the same key again: accepted false, said plainly
    form.get_by_role("button", name="Send signal").click()
    expect(outcome).to_have_attribute("data-accepted", "false")
    expect(outcome).to_contain_text("the wait it answered was over, or this key was already used")
    assert events_of(stack, tenant, run_id).count("signal") == 1
    expect(page.get_by_test_id("run-status")).to_have_text("WAITING")

    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("group", name="Cancel this run?").get_by_role(
        "button", name="Yes, cancel it"
    ).click()
    expect(page.get_by_test_id("run-status")).to_have_text("CANCELLED", timeout=30_000)
    expect(page.get_by_role("form", name="Send a signal")).to_have_count(0)


def test_approve_and_reject_from_the_awaiting_input_view(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    approve = stack.start_run(tenant, turns=1, delayMs=0, awaitSignal="approval")
    sign_in(page, tenant, "/awaiting")
    row = page.locator(f'tr[data-run-id="{approve}"]')
    expect(row).to_contain_text("approval", timeout=30_000)
    expect(row.locator("td[data-label=Until]")).to_contain_text(
        "in 60 min"
    )  # until when: the signal's timeout
    assert_accessible(page, "awaiting input")
    page.emulate_media(color_scheme="dark")
    assert_accessible(page, "awaiting input (dark)")
    page.emulate_media(color_scheme="light")
    shoot(page, "awaiting-input", tmp_path)

    row.get_by_role("button", name="Approve").click()
    outcome = row.get_by_test_id("approval-outcome")
    expect(outcome).to_have_attribute("data-decision", "approved")
    expect(outcome).to_be_focused()  # the row stays with its answer; focus is not lost
    assert stack.wait_settled(tenant, approve) == "SUCCEEDED"
    data = stack.gql(tenant, "query($id: ID!) { run(id: $id) { output } }", {"id": approve})
    assert data["run"]["output"]["signal"] == {"approved": True}

    reject = stack.start_run(tenant, turns=1, delayMs=0, awaitSignal="approval")
    row = page.locator(f'tr[data-run-id="{reject}"]')
    expect(row).to_contain_text("approval", timeout=30_000)
    row.get_by_role("button", name="Reject…").click()
    reason = row.get_by_label("Reason for rejecting (optional)")
    expect(reason).to_be_focused()
    assert stack.run_status(reject) == "WAITING"  # asked first: nothing sent yet
    reason.fill("too costly")
    row.get_by_role("button", name="Reject", exact=True).click()
    expect(row.get_by_test_id("approval-outcome")).to_have_attribute("data-decision", "rejected")
    assert stack.wait_settled(tenant, reject) == "SUCCEEDED"
    data = stack.gql(tenant, "query($id: ID!) { run(id: $id) { output } }", {"id": reject})
    assert data["run"]["output"]["signal"] == {"approved": False, "reason": "too costly"}
