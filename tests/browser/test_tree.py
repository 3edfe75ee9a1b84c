"""The run page's Tree tab (issue 28): a parent's children with their counts, live, a link to
each, and from a child the path back to the root; and a parent's children as bars on its
Waterfall (issue 45, item 9)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import assert_accessible, check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]
CHILDREN = """query($id: ID!) { run(id: $id) { children(first: 10) { edges { node { id } } } } }"""


def test_a_parent_shows_its_children_and_a_child_its_path_back(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    parent = stack.start_run(tenant, turns=1, delayMs=300, children=3, childTurns=2, maxParallel=3)
    sign_in(page, tenant, f"/runs/{parent}")
    # The tab is offered once the parent has started its children: a nudge, not a reload.
    tree_tab = page.get_by_role("tab", name=re.compile(r"^Tree\b"))
    expect(tree_tab).to_be_visible(timeout=30_000)
    tree_tab.click()
    expect(page).to_have_url(re.compile(rf"/runs/{parent}\?tab=tree$"))
    panel = page.get_by_role("tabpanel", name=re.compile(r"^Tree\b"))
    expect(page.get_by_test_id("run-status")).to_have_text("SUCCEEDED", timeout=30_000)

    children = page.get_by_role("table", name=re.compile(r"^Children\b"))
    expect(children.locator("tbody tr")).to_have_count(3)
    counts = panel.get_by_role("list", name="Children by status")
    expect(counts.get_by_role("listitem")).to_have_count(1)  # all three settled the same way
    expect(page.get_by_test_id("children-succeeded")).to_have_text("SUCCEEDED 3")
    expect(tree_tab).to_have_text("Tree 3")
    kids = [
        e["node"]["id"]
        for e in stack.gql(tenant, CHILDREN, {"id": parent})["run"]["children"]["edges"]
    ]
    assert len(kids) == 3
    for n, kid in enumerate(kids, 1):  # oldest first, each a link with its status and agent
        row = children.locator(f'tr[data-run-id="{kid}"]')
        expect(row.get_by_role("link", name=f"Child run {kid}", exact=True)).to_be_visible()
        expect(row.get_by_test_id("child-label")).to_have_text(f"child {n} of 3")
        expect(row.locator("[data-status]")).to_have_text("SUCCEEDED")
        expect(row.get_by_role("cell", name="demo", exact=True)).to_be_visible()
    assert (
        children.locator("tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.runId)")
        == kids
    )
    path = panel.get_by_role("navigation", name="Path from the root")
    expect(path.get_by_role("listitem")).to_have_count(1)  # the root: this run alone
    expect(panel.get_by_text("A top-level run: no run started it.")).to_be_visible()
    assert_accessible(page, "a parent's Tree tab")
    shoot(page, "run-tree", tmp_path)  # docs/screenshots only with OUTLIVE_SCREENSHOTS

    page.get_by_role("link", name=f"Child run {kids[1]}", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/runs/{kids[1]}\?tab=tree$"))
    expect(page.get_by_role("heading", name=re.compile(rf"^Run {kids[1][:8]}"))).to_be_visible()
    path = page.get_by_role("navigation", name="Path from the root")
    expect(path.get_by_role("listitem")).to_have_count(2)  # root → this run
    expect(path.get_by_role("link", name=f"Run {parent}", exact=True)).to_be_visible()
    expect(path.locator('[aria-current="page"]')).to_contain_text(kids[1][:8])
    expect(page.get_by_role("link", name=f"Parent run {parent}", exact=True)).to_be_visible()
    expect(page.get_by_text("It started no child runs.")).to_be_visible()
    expect(page.get_by_role("tab", name="Tree", exact=True)).to_be_visible()  # no count
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        assert_accessible(page, f"a child's Tree tab ({theme})")
    page.set_viewport_size({"width": 390, "height": 844})
    assert_accessible(page, "a child's Tree tab at 390 px")
    page.set_viewport_size({"width": 1440, "height": 900})

    path.get_by_role("link", name=f"Run {parent}", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/runs/{parent}\?tab=tree$"))
    expect(
        page.get_by_role("table", name=re.compile(r"^Children\b")).locator("tbody tr")
    ).to_have_count(3)


def test_a_parents_waterfall_draws_its_children_as_bars_under_the_attempt_that_started_them(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    """Issue 45, item 9: each child a bar on the parent's time scale, with its place ("child 2 of
    3"), its status and a link to its own waterfall, under the parent's attempt that started it
    (the first; the attempt that resumed after the children draws none)."""
    parent = stack.start_run(tenant, turns=1, delayMs=0, children=3, childTurns=2, maxParallel=3)
    assert stack.wait_settled(tenant, parent) == "SUCCEEDED"
    kids = [
        e["node"]["id"]
        for e in stack.gql(tenant, CHILDREN, {"id": parent})["run"]["children"]["edges"]
    ]
    sign_in(page, tenant, f"/runs/{parent}?tab=waterfall")
    bands = page.get_by_role("list", name="Waterfall").locator("li.band[data-attempt]")
    expect(bands).to_have_count(2)  # started the children and parked; resumed once they settled
    under = bands.nth(0).get_by_role("list", name="Children started by attempt 1")
    bars = under.locator("li.child-bar")
    expect(bars).to_have_count(3)
    assert bars.evaluate_all("(items) => items.map((i) => i.dataset.childId)") == kids
    for n, kid in enumerate(kids, 1):
        bar = under.locator(f'li[data-child-id="{kid}"]')
        expect(bar).to_have_attribute("data-status", "SUCCEEDED")
        expect(bar.get_by_role("link", name=f"child {n} of 3, run {kid}")).to_be_visible()
    expect(bands.nth(1).locator("li.child-bar")).to_have_count(0)
    check_screen(page, "a parent's waterfall with its children")
    under.get_by_role("link", name=f"child 2 of 3, run {kids[1]}").click()
    expect(page).to_have_url(re.compile(rf"/runs/{kids[1]}\?tab=waterfall$"))

    sign_in(page, tenant, f"/runs/{parent}")  # its Overview says the wait as what it was
    why = page.get_by_role("list", name="Why it is here")
    expect(why).to_contain_text("It waited for its child runs for")
    expect(why).to_contain_text("then went on once they had settled.")
