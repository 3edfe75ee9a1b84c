"""With no WebSocket at all (a proxy that refuses them), the app still works: it asks the API again
on navigation and on focus, and says it is not live."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import WebSocketRoute, expect

from tests.browser.conftest import Contexts, connection
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser


def test_without_the_socket_navigation_and_focus_still_refresh(
    contexts: Contexts, tenant: Tenant, stack: Stack
) -> None:
    context = contexts.new()
    refused: list[str] = []

    def refuse(ws: WebSocketRoute) -> None:
        refused.append(ws.url)
        ws.close(code=1013, reason="no WebSockets through this proxy")

    context.route_web_socket(re.compile(r"/graphql$"), refuse)
    page = context.new_page()
    page.goto(f"/runs#token={tenant.token}")
    expect(page.get_by_test_id("tenant")).to_have_text(tenant.slug)
    expect(page.get_by_text("No runs yet.")).to_be_visible()
    expect(connection(page)).to_have_attribute("data-state", "reconnecting")
    assert refused

    first = stack.start_run(tenant, turns=1, delayMs=0)
    assert stack.wait_settled(tenant, first) == "SUCCEEDED"
    nav = page.get_by_role("navigation", name="Main")
    nav.get_by_role("link", name="New run").click()
    expect(page.get_by_role("button", name="Start run")).to_be_visible()
    nav.get_by_role("link", name="Runs").click()  # navigation asks again
    expect(page.locator(f'tr[data-run-id="{first}"] [data-status]')).to_have_text("SUCCEEDED")

    second = stack.start_run(tenant, turns=1, delayMs=0)
    assert stack.wait_settled(tenant, second) == "SUCCEEDED"
    expect(page.locator(f'tr[data-run-id="{second}"]')).to_have_count(0)  # nobody told the page
    page.evaluate("window.dispatchEvent(new Event('focus'))")  # the person comes back to the tab
    expect(page.locator(f'tr[data-run-id="{second}"] [data-status]')).to_have_text("SUCCEEDED")
    expect(connection(page)).not_to_have_attribute("data-state", "live")
