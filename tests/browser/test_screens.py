"""Every screen renders, with its controls named for assistive technology; with
`OUTLIVE_SCREENSHOTS=docs/screenshots` the same walk refreshes the README's screenshots.

Webhooks, invitations and usage are in the contract but may not be in this server's schema yet:
their screens must then say so rather than break (their documents are apart from the runs')."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Contexts, connection
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


def shoot(page: Page, name: str, tmp_path: Path, *, full_page: bool = False) -> None:
    target = os.environ.get("OUTLIVE_SCREENSHOTS")
    folder = (ROOT / target) if target else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)


def test_every_screen_renders_with_named_controls(
    contexts: Contexts, tenant: Tenant, stack: Stack, sign_in: Callable[..., None], tmp_path: Path
) -> None:
    page = contexts.page()
    page.emulate_media(color_scheme="light")
    page.goto("/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    shoot(page, "sign-in", tmp_path)

    # a little history: a failed run, a cancelled one, a finished one, one under way
    failed = stack.start_run(tenant, turns=2, delayMs=0, failAtTurn=2)
    stack.wait_settled(tenant, failed)
    cancelled = stack.start_run(tenant, turns=50, delayMs=1000)
    stack.gql(tenant, "mutation($id: ID!) { cancelRun(id: $id) { id } }", {"id": cancelled})
    stack.wait_settled(tenant, cancelled)
    done = stack.start_run(tenant, turns=4, delayMs=50)
    stack.wait_settled(tenant, done)
    running = stack.start_run(tenant, turns=200, delayMs=1000)

    sign_in(page, tenant, "/runs")
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(4)
    expect(page.locator(f'tr[data-run-id="{running}"] [data-status]')).to_have_text("RUNNING")
    shoot(page, "runs", tmp_path)

    page.get_by_role("link", name=f"Run {done}").click()
    expect(page.get_by_test_id("run-status")).to_have_text("SUCCEEDED")
    # claimed, then a turn and its durable step 4 times, then succeeded
    page.get_by_role("tab", name="Events").click()
    expect(page.get_by_role("list", name="Timeline").get_by_role("listitem")).to_have_count(10)
    shoot(page, "run-detail", tmp_path, full_page=True)

    page.goto(f"/runs/{running}")
    expect(page.get_by_role("button", name="Cancel run")).to_be_enabled()
    page.get_by_role("tab", name="Events").click()
    expect(page.get_by_role("list", name="Timeline")).to_contain_text("turn")
    shoot(page, "run-running", tmp_path)
    page.get_by_role("button", name="Cancel run").click()
    page.get_by_role("button", name="Yes, cancel it").click()
    expect(page.get_by_test_id("run-status")).to_have_text("CANCELLED")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="New run").click()
    expect(page.get_by_role("heading", name="Start a run")).to_be_visible()
    for label in ("Agent", "Turns", "Delay ms", "Pause ms", "Await signal"):
        expect(page.get_by_label(label, exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Start run")).to_be_enabled()
    # the agent's description sets its `names` as code, not raw backticks (issue 45)
    description = page.get_by_test_id("agent-description")
    expect(description.locator("code").first).to_have_text("turns")
    expect(description).not_to_contain_text("`")
    # the demo's test knobs (x-advanced) are folded away: the form is short (it was 2,097 px)
    more = page.locator("details.more-options")
    expect(more.locator("summary")).to_have_text("More options (7)")
    for label in ("Fail at turn", "Flaky attempts", "Child index", "Usage per turn"):
        expect(page.get_by_label(label, exact=True)).to_be_hidden()
    page.set_viewport_size({"width": 1440, "height": 900})
    form = page.get_by_role("form", name="Start a run").bounding_box()
    assert form is not None
    assert form["height"] < 1_100, f"the Start form is {form['height']} px tall at 1440 px"
    page.set_viewport_size({"width": 1280, "height": 860})
    more.locator("summary").click()
    page.get_by_label("Fail at turn", exact=True).fill("0")
    more.locator("summary").click()  # closed again: a field with an error opens the fold
    expect(page.get_by_label("Fail at turn", exact=True)).to_be_hidden()
    page.get_by_label("Turns", exact=True).fill("0")
    page.get_by_role("button", name="Start run").click()
    expect(page.get_by_text("Turns must be at least 1")).to_be_visible()
    expect(page.get_by_text("Fail at turn must be at least 1")).to_be_visible()
    page.get_by_label("Fail at turn", exact=True).fill("")
    page.get_by_label("Turns", exact=True).fill("3")
    more.locator("summary").click()
    expect(page.get_by_label("Fail at turn", exact=True)).to_be_hidden()
    shoot(page, "start-run", tmp_path)

    for name, heading in (
        ("webhooks", "Webhooks"),
        ("members", "Members"),
        ("invitations", "Invitations"),
        ("budgets", "Budgets"),
        ("usage", "Usage"),
    ):
        if name == "invitations":  # from the Members screen
            page.get_by_role("link", name="Invite a member").click()
        else:
            page.get_by_role("navigation", name="Main").get_by_role("link", name=heading).click()
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        unavailable = page.get_by_text(re.compile("This server does not offer"))
        ready = page.locator("form, table, .empty")
        expect(unavailable.or_(ready).first).to_be_visible()
        expect(page.locator(".note-error")).to_have_count(0)
        if name == "usage" and not unavailable.count():
            # runs per day, drawn: today's bar holds this walk's runs
            chart = page.get_by_role("img", name=re.compile("Runs per day"))
            expect(chart).to_be_visible()
            expect(chart.locator("g[data-total]").last).not_to_have_attribute("data-total", "0")
        shoot(page, name, tmp_path)

    expect(connection(page)).to_have_text("Live")

    graphiql = contexts.page()
    sign_in(graphiql, tenant)
    graphiql.goto(
        f"/graphql#query={quote('subscription Nudges { nudges { type tenantId at id } }')}"
    )
    expect(graphiql.locator(".graphiql-query-editor")).to_contain_text("subscription Nudges")
    graphiql.get_by_role("button", name=re.compile(r"^Execute query")).click()
    stack.start_run(tenant, turns=2, delayMs=300)
    expect(graphiql.locator(".graphiql-response")).to_contain_text("run.")
    shoot(graphiql, "graphiql", tmp_path)
