"""The socket is a nudge, not a lifeline: stop the API, and the indicator says reconnecting; start
it again, and it says live, and the list shows what happened while it was away."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import connection
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser


def test_an_api_restart_shows_reconnecting_then_live_and_the_list_is_right(
    page: Page, tenant: Tenant, sign_in: Callable[..., None], stack: Stack
) -> None:
    sign_in(page, tenant, "/runs")
    page.evaluate("window.__noReload = true")
    run_id = stack.start_run(tenant, turns=3, delayMs=1200)
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    expect(row.locator("[data-status]")).to_have_text("RUNNING", timeout=15_000)

    stack.stop_api()  # graceful: open sockets are closed with 1012 (service restart)
    indicator = connection(page)
    expect(indicator).to_have_attribute("data-state", "reconnecting")
    expect(indicator).to_have_text("Reconnecting…")

    # The worker goes on without the API; its nudges reach nobody.
    assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"
    expect(row.locator("[data-status]")).to_have_text("RUNNING")  # nothing told the page yet
    expect(indicator).to_have_attribute("data-state", "reconnecting")  # still trying, not offline

    stack.start_api()
    expect(indicator).to_have_attribute("data-state", "live", timeout=45_000)
    expect(indicator).to_have_text("Live")
    # on reconnect every active query is asked again: the missed nudges cost nothing
    expect(row.locator("[data-status]")).to_have_text("SUCCEEDED", timeout=15_000)
    assert page.evaluate("window.__noReload") is True

    # and the nudges flow again
    second = stack.start_run(tenant, turns=1, delayMs=0)
    expect(page.locator(f'tr[data-run-id="{second}"] [data-status]')).to_have_text(
        "SUCCEEDED", timeout=30_000
    )
