"""Signing in: with a pasted token, with the link `outlive dev` prints, and out again."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import connection
from tests.browser.stack import Stack, Tenant, outlive_argv

pytestmark = pytest.mark.browser


def test_signs_in_with_a_pasted_token(page: Page, tenant: Tenant) -> None:
    page.goto("/")
    token = page.get_by_label("API token")
    token.fill("olv_not-a-real-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("did not accept")

    token.fill(tenant.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("tenant")).to_have_text(tenant.slug)
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(connection(page)).to_have_text("Live")
    assert page.evaluate("localStorage.getItem('outlive.token')") == tenant.token


def test_the_dev_link_signs_in_and_drops_the_token_from_the_address(
    page: Page, tenant: Tenant, stack: Stack
) -> None:
    page.goto(f"/#token={tenant.token}")
    expect(page.get_by_test_id("tenant")).to_have_text(tenant.slug)
    expect(page).to_have_url(f"{stack.base_url}/")


def test_signing_out_forgets_the_token(
    page: Page, tenant: Tenant, sign_in: Callable[..., None]
) -> None:
    sign_in(page, tenant)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    assert page.evaluate("localStorage.getItem('outlive.token')") is None


def test_a_never_valid_token_is_not_told_it_is_no_longer_accepted(page: Page) -> None:
    page.goto("/#token=olv_never-issued")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text(re.compile("did not accept that token"))


def test_a_revoked_token_lands_on_the_sign_in_screen(
    page: Page, stack: Stack, sign_in: Callable[..., None]
) -> None:
    tenant = stack.new_tenant()
    sign_in(page, tenant)
    listed = subprocess.run(
        outlive_argv("token", "list"), env=stack.env, capture_output=True, text=True, check=True
    )
    [line] = [x for x in listed.stdout.splitlines() if tenant.slug in x]
    subprocess.run(
        outlive_argv("token", "revoke", line.split()[0]), env=stack.env, check=True, timeout=60
    )
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text(re.compile("no longer accepts"))


def test_a_link_with_another_tenants_token_asks_before_switching(
    page: Page, tenant: Tenant, stack: Stack, sign_in: Callable[..., None]
) -> None:
    """A crafted `#token=` link must not silently sign a user into someone else's tenant."""
    other = stack.new_tenant()
    sign_in(page, tenant)
    page.goto(f"/runs#token={other.token}")
    dialog = page.get_by_role("dialog", name="Switch tenants?")
    expect(dialog.get_by_test_id("switch-current")).to_have_text(
        f"{tenant.slug} as owner@{tenant.slug}.test"
    )
    expect(dialog.get_by_test_id("switch-next")).to_have_text(
        f"{other.slug} as owner@{other.slug}.test"
    )
    expect(page).to_have_url(f"{stack.base_url}/runs")  # the token left the address bar
    assert page.evaluate("localStorage.getItem('outlive.token')") == tenant.token

    dialog.get_by_role("button", name="Stay signed in").click()
    expect(page.get_by_test_id("tenant")).to_have_text(tenant.slug)
    assert page.evaluate("localStorage.getItem('outlive.token')") == tenant.token

    page.goto(f"/#token={other.token}")
    page.get_by_role("button", name=f"Switch to {other.slug}").click()
    expect(page.get_by_test_id("tenant")).to_have_text(other.slug)
    assert page.evaluate("localStorage.getItem('outlive.token')") == other.token
