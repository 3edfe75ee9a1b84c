"""The usage page's tokens and cost per agent and day (issue 29): the figures are the usage the
runs' steps recorded, rolled up by `usageTokens`, and they follow new runs without a reload; a
cost with no price names the model and where prices come from; the page fits 390 px."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import assert_accessible, check_screen
from tests.browser.stack import Stack, Tenant, _asyncpg_dsn, run_async
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser


def execute(stack: Stack, sql: str, *args: Any) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(_asyncpg_dsn(stack.database_url))
        try:
            await conn.execute(sql, *args)
        finally:
            await conn.close()

    run_async(go())


def demo_with_usage(stack: Stack, tenant: Tenant, turns: int, inputs: int, outputs: int) -> str:
    """A demo run whose every turn records `inputs` and `outputs` tokens (model "demo", which
    has no price), run to the end by the real worker."""
    run_id = stack.start_run(
        tenant,
        turns=turns,
        delayMs=0,
        usagePerTurn={"inputTokens": inputs, "outputTokens": outputs},
    )
    assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"
    return run_id


def expect_figures(row: Locator, inputs: int, outputs: int, cost: str | re.Pattern[str]) -> None:
    """The row's tokens, grouped as the page's locale groups them, and its cost."""
    page = row.page
    for name, count in (("input-tokens", inputs), ("output-tokens", outputs)):
        grouped = page.evaluate("(n) => new Intl.NumberFormat().format(n)", count)
        expect(row.get_by_test_id(name)).to_have_text(grouped)
    expect(row.get_by_test_id("cost")).to_have_text(cost)


def test_usage_shows_the_tokens_and_cost_the_steps_recorded(
    page: Page, tenant: Tenant, sign_in: Callable[..., None], stack: Stack, tmp_path: Path
) -> None:
    priced = demo_with_usage(stack, tenant, turns=2, inputs=1200, outputs=345)
    older = demo_with_usage(stack, tenant, turns=1, inputs=1000, outputs=5)
    # The demo's model has no price and every run is the demo's: seed what only a priced model
    # and another agent on another day would have recorded, on the rows the steps wrote.
    execute(stack, "UPDATE run_steps SET cost_usd = 0.0125 WHERE run_id = $1::uuid", priced)
    execute(
        stack,
        "UPDATE run_steps SET completed_at = completed_at - interval '1 day'"
        " WHERE run_id = $1::uuid",
        older,
    )
    execute(stack, "UPDATE runs SET agent = 'llm' WHERE id = $1::uuid", older)

    sign_in(page, tenant, "/usage")
    days = stack.gql(tenant, "{ usageTokens(days: 7) { day agent } }")["usageTokens"]
    today = next(d["day"] for d in days if d["agent"] == "demo")
    yesterday = next(d["day"] for d in days if d["agent"] == "llm")
    assert yesterday < today

    by_day = page.get_by_role("table", name="Tokens and cost per day and agent")
    today_row = by_day.locator(f'tr[data-day="{today}"][data-agent="demo"]')
    old_row = by_day.locator(f'tr[data-day="{yesterday}"][data-agent="llm"]')
    expect_figures(today_row, 2400, 690, re.compile(r"^\$0[.,]025$"))  # 2 steps at $0.0125
    expect_figures(old_row, 1000, 5, "no price for demo")  # the model named, not "unknown"

    by_agent = page.get_by_role("table", name="Tokens and cost per agent")
    expect(by_agent.locator("tbody tr")).to_have_count(2)
    expect(by_agent.locator("tbody tr").first).to_have_attribute("data-agent", "demo")
    total = by_agent.get_by_test_id("tokens-total")
    # the priced part is summed and the unpriced model named (issue 40): not "unknown" for all
    partial = re.compile(r"^\$0[.,]025 \(demo unpriced\)$")
    expect_figures(total, 3400, 695, partial)
    note = page.get_by_test_id("prices-note")  # where prices come from, and what has none
    expect(note).to_contain_text("No price for demo")
    expect(note).to_contain_text("genai-prices and OUTLIVE_MODEL_PRICES")
    assert_accessible(page, "usage")
    check_screen(page, "usage with tokens")  # both themes, 1440 and 390 px: it fits at 390
    page.get_by_role("heading", name="Tokens and cost").scroll_into_view_if_needed()
    shoot(page, "usage-tokens", tmp_path)
    page.evaluate("() => window.scrollTo(0, 0)")

    # a new run's usage shows without a reload: its settle nudges the page to ask again
    page.evaluate("() => { window.__noReload = true; }")
    demo_with_usage(stack, tenant, turns=1, inputs=10, outputs=10)
    expect_figures(today_row, 2410, 700, partial)
    expect_figures(total, 3410, 705, partial)
    assert page.evaluate("window.__noReload") is True
