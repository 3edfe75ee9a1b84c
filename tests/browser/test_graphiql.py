"""GraphiQL at GET /graphql: from the package's own files (the page is cut off from the
internet, and asks it for nothing), with subscriptions that receive nudges."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Contexts
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser

SUBSCRIPTION = "subscription Nudges { nudges { type id } }"

# Keeps what the page sends on its WebSockets, so the test can wait for the subscribe message.
RECORD_SENT = """
const send = WebSocket.prototype.send;
window.__wsSent = [];
WebSocket.prototype.send = function (data) {
  window.__wsSent.push(String(data));
  return send.call(this, data);
};
"""
SUBSCRIBED = "() => window.__wsSent.some((m) => JSON.parse(m).type === 'subscribe')"


def test_graphiql_loads_offline_and_a_subscription_receives_a_nudge(
    contexts: Contexts, page: Page, tenant: Tenant, sign_in: Callable[..., None], stack: Stack
) -> None:
    sign_in(page, tenant)  # GraphiQL takes the token the app keeps
    page.add_init_script(RECORD_SENT)
    page.goto(f"/graphql#query={quote(SUBSCRIPTION)}")
    expect(page).to_have_title(re.compile("GraphiQL"))
    execute = page.get_by_role("button", name=re.compile(r"^Execute query"))
    expect(execute).to_be_visible()
    expect(page.locator(".graphiql-query-editor")).to_contain_text("subscription Nudges")

    execute.click()
    page.wait_for_function(SUBSCRIBED)

    run_id = stack.start_run(tenant, turns=3, delayMs=400)
    response = page.locator(".graphiql-response")
    expect(response).to_contain_text(re.compile(r'"type":\s*"run\.'), timeout=20_000)
    expect(response).to_contain_text(run_id)
    assert contexts.blocked == []


def test_graphiql_runs_a_query_with_the_apps_token(
    page: Page, tenant: Tenant, sign_in: Callable[..., None]
) -> None:
    sign_in(page, tenant)
    page.goto(f"/graphql#query={quote('query Who { viewer { tenant { slug } } }')}")
    expect(page.locator(".graphiql-query-editor")).to_contain_text("query Who")
    page.get_by_role("button", name=re.compile(r"^Execute query")).click()
    expect(page.locator(".graphiql-response")).to_contain_text(tenant.slug)
