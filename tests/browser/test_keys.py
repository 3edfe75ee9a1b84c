"""Run keys in the console (docs/keys.md, "In the console"): a run started with a key and tags from
the Start form, the run holding a key shown as the same key is typed again (with Open it and
Cancel it), a run queued behind it, the form keeping what was typed, and the runs list filtered
by key, by tag and with the children hidden, all from the URL."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import assert_accessible
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]
KEY = "conversation:42"


def open_start_form(page: Page) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="New run").click()
    expect(page.get_by_role("heading", name="Start a run")).to_be_visible()


def start_from_form(page: Page, *, key: str, tags: str = "", on_conflict: str = "") -> str:
    """Fills the Start form (a long demo run: 60 turns of a second) and starts it."""
    open_start_form(page)
    page.get_by_label("Turns", exact=True).fill("60")
    page.get_by_label("Delay ms", exact=True).fill("1000")
    page.get_by_label("Key", exact=True).fill(key)
    page.get_by_label("Tags", exact=True).fill(tags)
    if on_conflict:
        page.get_by_label("On conflict", exact=True).select_option(on_conflict)
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]{36}(\?.*)?$"))
    match = re.search(r"/runs/([0-9a-f-]{36})", page.url)
    assert match, page.url
    return match.group(1)


def test_a_key_from_the_form_shows_its_holder_queues_behind_it_and_filters_the_list(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    sign_in(page, tenant)
    first = start_from_form(page, key=KEY, tags="env:prod, team@x")
    expect(page.get_by_test_id("run-key")).to_have_text(KEY)
    expect(page.get_by_test_id("run-tags").get_by_role("link")).to_have_text(["env:prod", "team@x"])
    expect(page.get_by_test_id("run-queued-behind")).to_have_count(0)

    # the same key typed again: the run holding it, live, with what Start run will do
    open_start_form(page)
    expect(page.get_by_label("Key", exact=True)).to_have_value("")  # the started draft is gone
    page.get_by_label("Key", exact=True).fill(KEY)
    holder = page.get_by_role("region", name="Run holding this key")
    expect(holder.get_by_test_id("key-holder")).to_contain_text(f"Run {first[:8]} holds this key")
    expect(holder.locator("[data-status]")).to_have_text(re.compile("QUEUED|RUNNING"))
    expect(holder).to_contain_text("Start run will hand this run back")
    expect(holder.get_by_role("link", name="Open it")).to_have_attribute("href", f"/runs/{first}")
    page.get_by_label("On conflict", exact=True).select_option("ENQUEUE")
    expect(holder).to_contain_text("Start run will queue a new run behind it")
    assert_accessible(page, "start a run (a key held)")
    page.get_by_label("Key", exact=True).fill("nobody-holds-this")
    expect(page.get_by_test_id("key-holder")).to_have_text(
        "No run holds this key: Start run starts one at once."
    )

    # ENQUEUE: the new run waits behind the first, and its page says so
    second = start_from_form(page, key=KEY, on_conflict="ENQUEUE")
    assert second != first
    behind = page.get_by_test_id("run-queued-behind").get_by_role("link")
    expect(behind).to_have_text(first[:8])
    expect(page.get_by_role("list", name="Why it is here")).to_contain_text(
        f"Queued behind run {first[:8]}"
    )
    assert_accessible(page, "run page (queued behind)")
    behind.click()
    expect(page).to_have_url(re.compile(f"/runs/{first}$"))

    # Cancel it from the form: the line moves on, and the holder shown follows
    open_start_form(page)
    page.get_by_label("Key", exact=True).fill(KEY)
    holder = page.get_by_role("region", name="Run holding this key")
    expect(holder).to_contain_text("(1 more queued behind it)")
    holder.get_by_role("button", name="Cancel it").click()
    holder.get_by_role("group", name="Cancel the run holding this key?").get_by_role(
        "button", name="Yes, cancel it"
    ).click()
    expect(holder.get_by_test_id("key-holder")).to_contain_text(
        f"Run {second[:8]} holds this key", timeout=30_000
    )
    assert stack.wait_settled(tenant, first) == "CANCELLED"

    # REJECT while the key is held: refused, the active run named, the form as it was
    page.get_by_label("Tags", exact=True).fill("keep:me")
    page.get_by_label("Turns", exact=True).fill("7")
    page.get_by_label("On conflict", exact=True).select_option("REJECT")
    page.get_by_role("button", name="Start run").click()
    refused = page.get_by_role("alert")
    expect(refused).to_contain_text(f"run {second} is active for this key")
    expect(refused.get_by_role("link", name="Open the active run")).to_have_attribute(
        "href", f"/runs/{second}"
    )
    expect(page.get_by_label("Tags", exact=True)).to_have_value("keep:me")

    # away and back: what was typed is still there
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs", exact=True).click()
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    open_start_form(page)
    expect(page.get_by_label("Key", exact=True)).to_have_value(KEY)
    expect(page.get_by_label("Tags", exact=True)).to_have_value("keep:me")
    expect(page.get_by_label("On conflict", exact=True)).to_have_value("REJECT")
    expect(page.get_by_label("Turns", exact=True)).to_have_value("7")
    expect(page.get_by_label("Input as JSON")).to_have_value(re.compile(r'"turns": 7'))

    # the runs list by key and by tag, from the URL
    other = stack.start_run(tenant, turns=1, delayMs=0)
    stack.wait_settled(tenant, other)
    page.goto(f"/runs?key={KEY}")
    expect(page.get_by_label("Key", exact=True)).to_have_value(KEY)
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f'tr[data-run-id="{other}"]')).to_have_count(0)
    page.goto("/runs?tag=team@x")
    expect(page.get_by_label("Tags", exact=True)).to_have_value("team@x")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", first)
    page.goto("/runs?tag=team@x&tag=nobody")
    expect(page.get_by_text("No runs tagged team@x and nobody.")).to_be_visible()
    assert_accessible(page, "runs (by tags)")

    # and from the form: Filter puts the key in the URL
    page.goto("/runs")
    expect(rows).to_have_count(3)
    page.get_by_label("Key", exact=True).fill(KEY)
    page.get_by_role("button", name="Filter", exact=True).click()
    expect(page).to_have_url(re.compile(r"\?key=conversation%3A42$"))
    expect(rows).to_have_count(2)

    stack.gql(tenant, "mutation($id: ID!) { cancelRun(id: $id) { id } }", {"id": second})


def test_hide_children_keeps_the_top_level_runs_in_the_url(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    parent = stack.start_run(tenant, turns=1, delayMs=0, children=2)
    assert stack.wait_settled(tenant, parent) == "SUCCEEDED"
    sign_in(page, tenant, "/runs")
    rows = page.locator("tbody tr")
    expect(rows).to_have_count(3)  # the parent and its two children

    page.get_by_role("button", name="Hide children").click()
    expect(page).to_have_url(re.compile(r"\?children=hide$"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", parent)
    assert_accessible(page, "runs (children hidden)")

    page.reload()  # kept in the URL
    expect(rows).to_have_count(1)
    page.get_by_role("button", name="Show children").click()
    expect(page).to_have_url(re.compile(r"/runs$"))
    expect(rows).to_have_count(3)
