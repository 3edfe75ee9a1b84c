"""Webhooks, self-service: a failing delivery says when its next attempt is due, links to its run,
and "Retry now" sends it before then; deliveries are filtered by status; "Redeliver failed"
counts the failed ones and asks first; "Send test event" sends one; the deliveries are counted
and paged 20, 50 or 100 at a time; a delivery's attempts open
as a log (code, body excerpt, error). axe-core on the screen with a waiting delivery and with a
log open, in both themes, at 1440 and 390 px."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import assert_accessible, check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_console import Receiver, receiver
from tests.browser.test_screens import shoot

__all__ = ["receiver"]  # the fixture

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]

DELIVERY = """{ webhookEndpoints { deliveries { id status nextAttemptAt } } }"""


def _add_endpoint(page: Page, url: str) -> None:
    page.get_by_label("Endpoint URL").fill(url)
    page.get_by_role("button", name="Create endpoint").click()
    page.get_by_role("button", name="I have stored it").click()


def test_retry_now_sends_a_failing_delivery_before_its_next_attempt_is_due(
    page: Page,
    tenant: Tenant,
    sign_in: SignIn,
    stack: Stack,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    receiver.status = 500  # the first attempt fails; the next is due after the backoff (30 s)
    receiver.body = b'{"error": "down for maintenance"}'
    sign_in(page, tenant, "/webhooks")
    _add_endpoint(page, receiver.url)
    run_id = stack.start_run(tenant, turns=1, delayMs=0)
    assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"
    receiver.wait_for(1)

    row = page.locator("tr[data-delivery-id]")
    expect(row.get_by_test_id("delivery-response")).to_have_text("500")
    delivery_id = row.get_attribute("data-delivery-id") or ""
    retry = row.get_by_role(
        "button", name=f"Retry now run.succeeded delivery {delivery_id[:8]}", exact=True
    )
    expect(retry).to_be_visible()
    expect(row.get_by_test_id("delivery-status")).to_have_text("PENDING")
    expect(row.get_by_test_id("delivery-attempts")).to_have_text("1")
    expect(row.get_by_test_id("delivery-next-attempt").locator("time")).to_be_visible()
    expect(row.get_by_role("link", name=f"Run {run_id}", exact=True)).to_be_visible()
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        assert_accessible(page, f"webhooks with a failing delivery ({theme})")
    page.emulate_media(color_scheme="light")
    shoot(page, "webhooks-retry", tmp_path)

    (waiting,) = stack.gql(tenant, DELIVERY)["webhookEndpoints"][0]["deliveries"]
    due = datetime.fromisoformat(waiting["nextAttemptAt"]).timestamp()
    receiver.status, receiver.body = 200, b"ok"
    retry.click()
    expect(row.get_by_test_id("delivery-status")).to_have_text("DELIVERED", timeout=20_000)
    receiver.wait_for(2)
    assert receiver.times[1] < due, "sent when it was due anyway, not when asked"
    expect(row.get_by_test_id("delivery-attempts")).to_have_text("2")
    expect(row.get_by_test_id("delivery-next-attempt")).to_have_text("—")

    # its attempts, newest first: the 200 and its body, then the 500 with its body and error
    toggle = row.get_by_test_id("delivery-attempts").get_by_role("button")
    expect(toggle).to_have_accessible_name(re.compile(r"^2 attempts: show the log"))
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    attempts = page.get_by_role(
        "list", name=f"Attempts of run.succeeded delivery {delivery_id[:8]}"
    )
    items = attempts.get_by_test_id("delivery-attempt")
    expect(items).to_have_count(2)
    expect(items.nth(0).get_by_test_id("attempt-code")).to_have_text("HTTP 200")
    expect(items.nth(0).get_by_test_id("attempt-body")).to_have_text("ok")
    expect(items.nth(0).get_by_test_id("attempt-error")).to_have_count(0)
    expect(items.nth(1).get_by_test_id("attempt-code")).to_have_text("HTTP 500")
    expect(items.nth(1).get_by_test_id("attempt-body")).to_have_text(
        '{"error": "down for maintenance"}'
    )
    expect(items.nth(1).get_by_test_id("attempt-error")).to_have_text("answered 500")
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for theme in ("light", "dark"):
            page.emulate_media(color_scheme=theme)
            assert_accessible(page, f"a delivery's attempt log ({theme}, {width} px)")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.emulate_media(color_scheme="light")
    page.locator(".table-wrap").first.evaluate("(wrap) => { wrap.scrollLeft = 0; }")  # as at 390
    attempts.scroll_into_view_if_needed()
    shoot(page, "webhooks-attempts", tmp_path)
    toggle.click()
    expect(attempts).to_have_count(0)
    expect(
        row.get_by_role(
            "button", name=f"Redeliver run.succeeded delivery {delivery_id[:8]}", exact=True
        )
    ).to_be_enabled()

    # filtered by status: none failed, this one delivered
    total = page.get_by_test_id("deliveries-total")
    expect(total).to_have_text("1 delivery")
    page.get_by_label("Delivery status", exact=True).select_option("FAILED")
    expect(page.get_by_text("No deliveries here.")).to_be_visible()
    expect(total).to_have_text("0 failed deliveries")
    page.get_by_label("Delivery status", exact=True).select_option("DELIVERED")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("delivery-status")).to_have_text("DELIVERED")

    # "Redeliver failed" counts first: there are none
    page.get_by_role("button", name=f"Redeliver failed deliveries to {receiver.url}").click()
    expect(page.get_by_text("No failed deliveries.")).to_be_visible()

    # "Send test event": a webhook.test delivery, sent like the others
    page.get_by_label("Delivery status", exact=True).select_option("")
    page.get_by_role("button", name=f"Send test event to {receiver.url}", exact=True).click()
    test_row = row.filter(has_text="webhook.test")
    expect(test_row.get_by_test_id("delivery-status")).to_have_text("DELIVERED", timeout=20_000)
    receiver.wait_for(3)
    expect(total).to_have_text("2 deliveries")
    # a page size of its own: 50 a page, the same two
    page.get_by_label("Deliveries per page").select_option("50")
    expect(row).to_have_count(2)
    expect(total).to_have_text("2 deliveries")
    assert_accessible(page, "webhooks with 50 deliveries a page")


def test_retry_all_pending_now_sends_every_waiting_delivery_and_clears_their_last_error(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, receiver: Receiver
) -> None:

    receiver.status = 500  # each first attempt fails; each next one is due after the backoff
    sign_in(page, tenant, "/webhooks")
    _add_endpoint(page, receiver.url)
    for _ in range(2):
        run_id = stack.start_run(tenant, turns=1, delayMs=0)
        assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"
    receiver.wait_for(2)
    rows = page.locator("tr[data-delivery-id]")
    expect(rows).to_have_count(2)
    for i in range(2):
        expect(rows.nth(i).get_by_test_id("delivery-next-attempt").locator("time")).to_be_visible()
        expect(rows.nth(i)).to_contain_text("answered 500")
    check_screen(page, "webhooks with deliveries waiting for a retry")  # cards at 390 px

    receiver.status = 200
    page.get_by_role("button", name=re.compile(r"^Retry all pending now: deliveries to ")).click()
    expect(page.get_by_test_id("retry-pending-tried")).to_have_text("2 deliveries tried now.")
    for i in range(2):
        expect(rows.nth(i).get_by_test_id("delivery-status")).to_have_text(
            "DELIVERED", timeout=20_000
        )
        expect(rows.nth(i)).not_to_contain_text("answered 500")  # its log keeps it, the row not
    receiver.wait_for(4)
