"""The Members screen (issue 45, item 3): who is in the tenant, their role and their live tokens;
an admin changes a role in place and removes a member after a question, and the list follows
`member.updated` without a reload. axe-core in both themes at 1440 and 390 px, no sideways
scrolling at 390 px."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import check_screen
from tests.browser.stack import Stack, Tenant, outlive_argv
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]


def member_token(stack: Stack, tenant: Tenant, email: str, role: str) -> str:
    """A token of a new member of the tenant, with that role (`outlive token create`)."""
    done = subprocess.run(
        outlive_argv("token", "create", "--tenant", tenant.slug, "--email", email, "--role", role),
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def viewer_status(stack: Stack, token: str) -> int:
    response = httpx.post(
        f"{stack.base_url}/graphql",
        json={"query": "{ viewer { role } }"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    body = response.json()
    return 401 if response.status_code == 401 or body.get("errors") else 200


def test_members_change_role_and_remove(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack, tmp_path: Path
) -> None:
    email = f"ops@{tenant.slug}.test"
    token = member_token(stack, tenant, email, "OPERATOR")
    sign_in(page, tenant, "/members")
    table = page.get_by_role("table", name="Members")
    owner = table.locator(f'tr[data-email="owner@{tenant.slug}.test"]')
    expect(owner).to_contain_text("(you)")
    expect(owner.get_by_test_id("member-tokens")).to_have_text("1")

    row = table.locator(f'tr[data-email="{email}"]')
    expect(row.get_by_label(f"Role of {email}")).to_have_value("OPERATOR")
    expect(row.get_by_test_id("member-tokens")).to_have_text("1")
    check_screen(page, "members")
    shoot(page, "members", tmp_path)

    # a change made elsewhere shows without a reload (member.updated)
    page.evaluate("() => { window.__noReload = true; }")
    user_id = next(
        m["userId"]
        for m in stack.gql(tenant, "{ members { userId email } }")["members"]
        if m["email"] == email
    )
    stack.gql(
        tenant,
        "mutation($u: ID!) { setMemberRole(userId: $u, role: ADMIN) { role } }",
        {"u": user_id},
    )
    expect(row.get_by_label(f"Role of {email}")).to_have_value("ADMIN")

    # the role changes in place, and their token acts with it
    row.get_by_label(f"Role of {email}").select_option("VIEWER")
    expect(row.get_by_label(f"Role of {email}")).to_have_value("VIEWER")
    members = stack.gql(tenant, "{ members { email role } }")["members"]
    assert {"email": email, "role": "VIEWER"} in members

    # the last admin cannot be demoted: the refusal is said in the row
    owner.get_by_label(f"Role of owner@{tenant.slug}.test").select_option("VIEWER")
    expect(owner.get_by_role("alert")).to_be_visible()
    assert stack.gql(tenant, "{ viewer { role } }")["viewer"]["role"] == "ADMIN"

    # remove asks first; their token stops working
    row.get_by_role("button", name=f"Remove {email}").click()
    row.get_by_role("button", name="Yes, remove").click()
    expect(row).to_have_count(0)
    assert viewer_status(stack, token) == 401
    assert page.evaluate("window.__noReload") is True
