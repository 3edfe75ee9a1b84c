"""Budgets and pauses in the console (issue 42, item 7): the Budgets screen (spent, reserved,
held runs, a bar against the limit with its warnAt mark, add, edit, delete) following
`budget.updated` nudges without a reload; a run held by a budget in the approvals inbox with
"raise once", "raise the limit" and "cancel"; Pause and Resume on the run page and the Agents
page. axe-core in both themes at 1440 and 390 px, and no sideways scrolling at 390 px."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Contexts, check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]
PER_TURN = {"inputTokens": 30, "outputTokens": 30}  # 60 tokens a turn, reserved before it starts


def run_field(stack: Stack, tenant: Tenant, run_id: str, field: str) -> object:
    data = stack.gql(tenant, f"query($id: ID!) {{ run(id: $id) {{ {field} }} }}", {"id": run_id})
    return data["run"][field]


def test_budgets_screen_holds_a_run_and_the_inbox_lets_it_go(
    contexts: Contexts, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    page = contexts.page()
    sign_in(page, tenant, "/budgets")
    expect(page.get_by_text("No budgets: runs spend without a limit.")).to_be_visible()

    # the form refuses a budget with no limit, then adds a tenant's daily budget of 100 tokens
    form = page.get_by_role("form", name="Add a budget")
    form.get_by_role("button", name="Add budget").click()
    expect(form.get_by_text("Give a token limit, a USD limit, or both.")).to_be_visible()
    expect(form.get_by_label("Token limit")).to_have_attribute("aria-invalid", "true")
    form.get_by_label("Token limit").fill("100")
    form.get_by_label("Warn at (%)").fill("50")
    form.get_by_role("button", name="Add budget").click()
    card = page.get_by_role("article", name="Budget Tenant, per day")
    expect(card.get_by_test_id("budget-tokens")).to_have_text("0 of 100")
    expect(card.get_by_test_id("budget-held")).to_have_text("0")

    # a run whose second turn would pass it is held: the card follows without a reload
    page.evaluate("() => { window.__noReload = true; }")
    held = stack.start_run(tenant, turns=3, delayMs=0, usagePerTurn=PER_TURN)
    expect(card.get_by_test_id("budget-held")).to_have_text("1", timeout=30_000)
    expect(card.get_by_test_id("budget-tokens")).to_have_text("60 of 100")
    expect(card.get_by_test_id("bar-tokens")).to_have_class(re.compile("budget-warned"))
    assert page.evaluate("window.__noReload") is True
    assert run_field(stack, tenant, held, "waitingFor") == "budget"
    check_screen(page, "budgets")
    shoot(page, "budgets", tmp_path, full_page=True)

    # the inbox shows the hold with its ways out; "raise the limit" opens the budget's edit form
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Awaiting input").click()
    row = page.locator(f'tr[data-run-id="{held}"]')
    expect(row).to_contain_text("a budget")
    expect(row.get_by_test_id("inbox-input")).to_contain_text('"turns":3')
    expect(row.get_by_role("button", name="Raise once")).to_be_visible()
    check_screen(page, "inbox with a held run")
    shoot(page, "awaiting-held", tmp_path)
    row.get_by_role("link", name="Raise the limit").click()
    edit = page.get_by_role("form", name="Edit: Tenant, per day")
    expect(edit.get_by_label("Token limit")).to_be_focused()
    expect(edit.get_by_label("Applies to")).to_be_disabled()
    edit.get_by_label("Token limit").fill("400")
    edit.get_by_role("button", name="Save budget").click()
    # a raised limit lets the held run go on by itself: it finishes, and the card says so
    assert stack.wait_settled(tenant, held) == "SUCCEEDED"
    expect(card.get_by_test_id("budget-tokens")).to_have_text("180 of 400")
    expect(card.get_by_test_id("budget-held")).to_have_text("0")

    # "raise once": a run held again goes on past the budget, this once
    over = stack.start_run(tenant, turns=6, delayMs=0, usagePerTurn=PER_TURN)
    expect(card.get_by_test_id("budget-held")).to_have_text("1", timeout=30_000)
    page.goto("/awaiting")
    row = page.locator(f'tr[data-run-id="{over}"]')
    row.get_by_role("button", name="Raise once").click()
    expect(row).to_have_count(0, timeout=30_000)  # it resumed: it left the inbox
    assert stack.wait_settled(tenant, over) == "SUCCEEDED"
    # and "cancel" settles a held run at once, after asking (the period spent 540 of 400). The
    # page is waited on before the database: its requests pass through this thread's route
    # handler (conftest's internet cut-off), which runs only while Playwright is called.
    second = stack.start_run(tenant, turns=2, delayMs=0, usagePerTurn=PER_TURN)
    other = page.locator(f'tr[data-run-id="{second}"]')
    other.get_by_role("button", name="Cancel…").click()
    other.get_by_role("button", name="Yes, cancel it").click()
    expect(other).to_have_count(0)
    assert stack.wait_settled(tenant, second) == "CANCELLED"

    # delete, after asking
    page.goto("/budgets")
    card.get_by_role("button", name="Delete budget Tenant, per day").click()
    card.get_by_role("button", name="Yes, delete").click()
    expect(page.get_by_text("No budgets: runs spend without a limit.")).to_be_visible()
    assert stack.gql(tenant, "{ budgets { id } }")["budgets"] == []


def test_pause_and_resume_a_run_and_an_agent(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    long = stack.start_run(tenant, turns=300, delayMs=200)
    sign_in(page, tenant, f"/runs/{long}")
    status = page.get_by_test_id("run-status")
    expect(status).to_have_text("RUNNING", timeout=30_000)
    page.get_by_role("group", name="Pause or resume").get_by_role("button", name="Pause").click()
    expect(status).to_have_text("WAITING", timeout=30_000)
    why = page.get_by_role("list", name="Why it is here")
    expect(why).to_contain_text("Paused since")
    assert run_field(stack, tenant, long, "waitingFor") == "pause"
    expect(page.get_by_role("form", name="Send a signal")).to_be_hidden()  # it waits for no signal
    check_screen(page, "a paused run")
    page.get_by_role("group", name="Pause or resume").get_by_role("button", name="Resume").click()
    expect(status).to_have_text("RUNNING", timeout=30_000)
    assert run_field(stack, tenant, long, "pausedAt") is None

    # the Agents page pauses the agent: its running run and a new one are held, then let go
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    demo = page.get_by_role("article", name="Agent demo")
    demo.get_by_role("button", name="Pause agent demo").click()
    expect(demo.get_by_test_id("agent-state")).to_have_text("PAUSED")
    states = stack.gql(tenant, "{ agentStates { agent paused } }")["agentStates"]
    assert {"agent": "demo", "paused": True} in states
    fresh = stack.start_keyed(tenant, "fresh", turns=1, delayMs=0)
    check_screen(page, "agents with a paused agent")
    shoot(page, "agents-paused", tmp_path)
    page.goto("/awaiting")
    expect(page.locator(f'tr[data-run-id="{fresh}"]')).to_contain_text("a pause", timeout=30_000)
    expect(page.locator(f'tr[data-run-id="{long}"]')).to_contain_text("a pause", timeout=30_000)
    # "cancel" in the inbox settles a held run at once, after asking
    held = page.locator(f'tr[data-run-id="{long}"]')
    held.get_by_role("button", name="Cancel…").click()
    held.get_by_role("button", name="Yes, cancel it").click()
    expect(held).to_have_count(0)
    assert stack.wait_settled(tenant, long) == "CANCELLED"
    page.goto("/agents")
    demo.get_by_role("button", name="Resume agent demo").click()
    expect(demo.get_by_test_id("agent-state")).to_have_count(0)
    expect(demo.get_by_role("button", name="Pause agent demo")).to_be_visible()
    assert stack.wait_settled(tenant, fresh) == "SUCCEEDED"
