"""The runs screens, live: a run seen from QUEUED to SUCCEEDED without a reload, Cancel run, a
second page that sees what the first started, and the status filter following a run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Contexts, assert_accessible, check_screen
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]

# Records every text the run's status badge shows, in order, and marks the document so that a
# reload (which would wipe the mark) is caught.
WATCH_STATUS = """() => {
  window.__statuses = [];
  window.__noReload = true;
  const look = () => {
    const el = document.querySelector('[data-testid="run-status"]');
    const text = el && el.textContent;
    const last = window.__statuses[window.__statuses.length - 1];
    if (text && last !== text) window.__statuses.push(text);
  };
  new MutationObserver(look).observe(
    document.body, {subtree: true, childList: true, characterData: true});
}"""


def run_id_of(page: Page) -> str:
    match = re.search(r"/runs/([0-9a-f-]{36})", page.url)
    assert match, page.url
    return match.group(1)


def start_demo_run(page: Page, *, turns: int, delay_ms: int) -> str:
    page.get_by_role("navigation", name="Main").get_by_role("link", name="New run").click()
    expect(page.get_by_label("Agent")).to_have_value("demo")
    page.get_by_label("Turns", exact=True).fill(str(turns))
    page.get_by_label("Delay ms", exact=True).fill(str(delay_ms))
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/[0-9a-f-]{36}$"))
    return run_id_of(page)


def test_a_demo_run_goes_queued_running_succeeded_without_a_reload(
    page: Page, tenant: Tenant, sign_in: SignIn
) -> None:
    sign_in(page, tenant)
    page.evaluate(WATCH_STATUS)
    start_demo_run(page, turns=3, delay_ms=1000)

    status = page.get_by_test_id("run-status")
    expect(status).to_have_text("SUCCEEDED", timeout=30_000)
    assert page.evaluate("window.__statuses") == ["QUEUED", "RUNNING", "SUCCEEDED"]
    assert page.evaluate("window.__noReload") is True

    expect(page.get_by_label("Output")).to_contain_text('"turns": 3')
    page.get_by_role("tab", name="Events").click()
    timeline = page.get_by_role("list", name="Timeline")
    # claimed, then a turn and its durable step 3 times, then succeeded
    expect(timeline.get_by_role("listitem")).to_have_count(8)
    expect(timeline.locator("li.event-step")).to_have_count(3)
    expect(timeline.get_by_role("listitem").last).to_contain_text("succeeded")
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)


def test_cancel_a_running_run(page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack) -> None:
    sign_in(page, tenant)
    run_id = start_demo_run(page, turns=60, delay_ms=500)
    status = page.get_by_test_id("run-status")
    expect(status).to_have_text("RUNNING", timeout=20_000)
    # a turn or two on the timeline: the run is really under way
    page.get_by_role("tab", name="Events").click()
    expect(page.get_by_role("list", name="Timeline")).to_contain_text("turn", timeout=10_000)

    page.get_by_role("button", name="Cancel run").click()
    confirm = page.get_by_role("group", name="Cancel this run?")
    expect(confirm.get_by_role("button", name="Yes, cancel it")).to_be_focused()
    assert stack.run_status(run_id) == "RUNNING"  # nothing happens before the confirmation
    confirm.get_by_label("Reason (optional)").fill("wrong customer")
    confirm.get_by_role("button", name="Yes, cancel it").click()
    expect(status).to_have_text("CANCELLED", timeout=20_000)
    expect(page.get_by_role("button", name="Cancel run")).to_have_count(0)
    timeline = page.get_by_role("list", name="Timeline")
    expect(timeline.get_by_role("listitem").last).to_contain_text("cancelled")
    # who asked and why, on the timeline (the request's event, before the settle)
    requested = timeline.locator("li.event-cancel_requested")
    expect(requested).to_contain_text("wrong customer")
    expect(requested).to_contain_text(f"owner@{tenant.slug}.test")
    # the timeline's search (issue 45, item 4): the text in a type or in the data, any case
    page.get_by_label("Search", exact=True).fill("WRONG CUSTOMER")
    expect(timeline.get_by_role("listitem")).to_have_count(1)
    expect(timeline.get_by_role("listitem")).to_contain_text("cancel_requested")
    page.get_by_label("Search", exact=True).fill("")
    expect(timeline.get_by_role("listitem").last).to_contain_text("cancelled")
    assert stack.run_status(run_id) == "CANCELLED"


def test_a_second_page_sees_a_run_started_in_the_first(
    contexts: Contexts, tenant: Tenant, sign_in: SignIn
) -> None:
    first, second = contexts.page(), contexts.page()  # two browsers, in effect
    sign_in(first, tenant)
    sign_in(second, tenant, "/runs")
    expect(second.get_by_text("No runs yet.")).to_be_visible()
    second.evaluate("window.__noReload = true")

    run_id = start_demo_run(first, turns=2, delay_ms=800)

    row = second.locator(f'tr[data-run-id="{run_id}"]')
    expect(row).to_be_visible(timeout=15_000)
    expect(row).to_contain_text("demo")
    expect(row.locator("[data-status]")).to_have_text("SUCCEEDED", timeout=30_000)
    expect(second.locator("tbody tr")).to_have_count(1)
    assert second.evaluate("window.__noReload") is True


def test_the_status_filter_follows_a_run(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    sign_in(page, tenant, "/runs")
    status = page.get_by_role("group", name="Status")
    status.get_by_role("checkbox", name="RUNNING").check()
    expect(page).to_have_url(re.compile(r"status=RUNNING"))
    expect(page.get_by_text("No running runs.")).to_be_visible()

    run_id = stack.start_run(tenant, turns=3, delayMs=1000)
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    expect(row).to_be_visible(timeout=15_000)  # it shows up once it runs …
    expect(row).to_have_count(0, timeout=30_000)  # … and leaves when it succeeds
    expect(page.get_by_text("No running runs.")).to_be_visible()

    status.get_by_role("checkbox", name="RUNNING").uncheck()
    status.get_by_role("checkbox", name="SUCCEEDED").check()
    expect(page).to_have_url(re.compile(r"\?status=SUCCEEDED$"))
    expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_be_visible()


def test_the_list_follows_a_run_by_asking_for_that_run_alone_with_persisted_queries(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    """run.created asks for the list again; each run.updated asks for that run alone (RunDetail),
    and the normalized cache updates its row. Queries go as GETs with the document's hash."""
    asked: list[tuple[str, str, bool]] = []

    def record(request: Any) -> None:
        if not request.url.split("?")[0].endswith("/graphql"):
            return
        if request.method == "GET":
            params = parse_qs(urlsplit(request.url).query)
            asked.append(("GET", params.get("operationName", [""])[0], "query" in params))
        else:
            body = json.loads(request.post_data or "{}")
            asked.append(("POST", body.get("operationName") or "", "query" in body))

    page.on("request", record)
    sign_in(page, tenant, "/runs")
    expect(page.get_by_text("No runs yet.")).to_be_visible()
    before = len(asked)

    run_id = stack.start_run(tenant, turns=2, delayMs=700)
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    expect(row).to_be_visible(timeout=15_000)
    expect(row.locator("[data-status]")).to_have_text("SUCCEEDED", timeout=30_000)

    during = asked[before:]
    names = [name for _, name, _ in during]
    assert "RunDetail" in names, during  # the updates: that run alone
    assert names.count("Runs") <= 2, during  # the creation (and at most one focus or reconnect)
    gets = [entry for entry in during if entry[0] == "GET"]
    assert gets, during
    assert not any(has_query for _, _, has_query in gets), during  # the hash, never the text


def test_a_short_id_finds_its_run_and_a_bad_one_gets_a_page_with_a_way_back(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    run_id = stack.start_run(tenant, turns=1, delayMs=0)
    stack.wait_settled(tenant, run_id)
    sign_in(page, tenant, "/runs")
    search = page.get_by_role("searchbox", name="Search runs")
    search.fill(run_id[:8])  # the short id the list shows
    page.get_by_role("button", name="Open").click()
    expect(page).to_have_url(re.compile(f"/runs/{run_id}$"))  # the address gets the full id
    expect(page.get_by_test_id("run-status")).to_have_text("SUCCEEDED")

    # the same line filters by a key or a tag (issue 45, item 10), or says what it takes
    keyed = stack.gql(
        tenant,
        "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }",
        {"i": {"agent": "demo", "key": "order-42", "tags": ["vip"], "input": {"delayMs": 0}}},
    )["startRun"]["run"]["id"]
    page.goto("/runs")
    search.fill("key:order-42")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"/runs\?key=order-42$"))
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    expect(page.locator(f'tr[data-run-id="{keyed}"]')).to_be_visible()
    page.goto("/runs")
    search.fill("#vip")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"/runs\?tag=vip$"))
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    search.fill("nothing like an id")
    search.press("Enter")
    expect(page.get_by_text("key:… or tag:…")).to_be_visible()

    page.goto(f"/runs/{run_id[:6]}")
    expect(page).to_have_url(re.compile(f"/runs/{run_id}$"))

    other = "0000" if not run_id.startswith("0000") else "ffff"
    page.goto(f"/runs/{other}")
    expect(page.get_by_role("heading", name="Run not found")).to_be_visible()
    assert_accessible(page, "run not found")
    page.goto("/runs/not-an-id!")
    expect(page.get_by_role("heading", name="Run not found")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("is not the start of a run id")
    page.get_by_role("link", name="← All runs").click()
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()


def test_each_row_says_what_its_run_cost(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    """Issue 45, item 10: a Cost column, from RunsCost (asked apart from the page); a run whose
    steps recorded usage of a model with no price says its tokens and names the model, a run
    with no model usage says "—", and a run settling while the list is open gets its cost then."""
    sign_in(page, tenant, "/runs")
    expect(page.get_by_text("No runs yet.")).to_be_visible()
    # keys of their own: under the agent's default key the second start would be the first run
    plain = stack.start_keyed(tenant, "cost-plain", turns=1, delayMs=0)
    used = stack.start_keyed(
        tenant,
        "cost-used",
        turns=2,
        delayMs=300,
        usagePerTurn={"inputTokens": 100, "outputTokens": 20},
    )
    cost = page.locator(f'tr[data-run-id="{used}"]').get_by_test_id("run-cost")
    expect(cost).to_have_text("240 tokens, no price for demo", timeout=30_000)
    expect(page.locator(f'tr[data-run-id="{plain}"]').get_by_test_id("run-cost")).to_have_text("—")
    check_screen(page, "runs list with costs")  # both themes, 1440 and 390 px
