"""Invitations end to end in Chromium: invite from the Invitations screen, the email reaches a
real SMTP server (aiosmtpd on loopback, sent by a real `outlive worker`), its link opens the accept
screen in a fresh browser, which says whose tenant it is and with which role, accepts and signs
the invitee in; the same link again gets a page that says it was used as soon as it opens.
Revoke asks first (its link then says so on opening); Resend sends a new code."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from playwright.sync_api import Page, expect

from tests.browser.conftest import Contexts, assert_accessible
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def mail_worker(stack: Stack) -> Iterator[Inbox]:
    """The stack's worker, swapped for one that sends its emails to an SMTP server here."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    assert stack.worker is not None
    stack.worker.stop()
    mailer = stack.start_worker(
        "mailer", OUTLIVE_SMTP_URL=f"smtp://127.0.0.1:{port}", OUTLIVE_PUBLIC_URL=stack.base_url
    )
    try:
        yield inbox
    finally:
        mailer.stop()
        controller.stop()
        stack.worker = stack.start_worker()


def link_in(message: Message) -> str:
    body = message.get_payload(decode=True).decode()
    found = re.search(r"(http://\S+#invitation=\S+)", body)
    assert found is not None, body
    return found.group(1)


def both_themes_accessible(page: Page, screen: str) -> None:
    for theme in ("light", "dark"):
        page.emulate_media(color_scheme=theme)
        assert_accessible(page, f"{screen} ({theme})")


def test_invite_email_accept_signed_in(
    contexts: Contexts,
    tenant: Tenant,
    sign_in: SignIn,
    stack: Stack,
    mail_worker: Inbox,
    tmp_path: Path,
) -> None:
    owner = contexts.page()
    sign_in(owner, tenant, "/invitations")
    owner.get_by_label("Email").fill("ada@example.com")
    owner.get_by_role("button", name="Send invitation").click()
    row = owner.locator('tr[data-email="ada@example.com"]')
    expect(row.locator("[data-status]")).to_have_text("SENT", timeout=30_000)
    (message,) = mail_worker.messages
    link = link_in(message)
    assert urlsplit(link).netloc == urlsplit(stack.base_url).netloc

    invitee = contexts.page()  # a fresh browser: nobody signed in
    invitee.goto(link)
    expect(invitee.get_by_role("heading", name=f"Join {tenant.slug} on Outlive")).to_be_visible()
    expect(invitee.get_by_text("ada@example.com")).to_be_visible()
    expect(invitee.get_by_text("OPERATOR")).to_be_visible()  # the role, as the server says
    assert "invitation=" not in invitee.url  # the code left the address bar at once
    both_themes_accessible(invitee, "accept invitation")
    invitee.emulate_media(color_scheme="light")
    shoot(invitee, "invitation-accept", tmp_path)
    invitee.get_by_role("button", name="Accept and sign in").click()
    expect(invitee.get_by_role("heading", name=f"Welcome to {tenant.slug}")).to_be_visible()
    expect(invitee.get_by_test_id("new-token")).to_have_text(re.compile(r"^olv_"))
    both_themes_accessible(invitee, "invitation accepted")
    invitee.get_by_role("button", name="Open the console").click()
    expect(invitee.get_by_test_id("tenant")).to_have_text(tenant.slug)
    expect(invitee.locator(".who")).to_contain_text("ada@example.com")
    expect(invitee.get_by_role("heading", name="Runs", exact=True)).to_be_visible()

    expect(row.locator("[data-status]")).to_have_text("ACCEPTED")  # live on the owner's page
    used = contexts.page()
    used.goto(link)  # checked when the page opens: it says so before anyone clicks
    expect(used.get_by_role("heading", name="This invitation was already used")).to_be_visible()
    expect(used.get_by_role("button", name="Accept and sign in")).to_have_count(0)
    both_themes_accessible(used, "invitation already used")
    used.get_by_role("button", name="Sign in with an API token instead").click()
    expect(used.get_by_role("button", name="Sign in")).to_be_visible()

    # Revoke asks first and its link stops working; Resend sends a new one
    owner.get_by_label("Email").fill("bob@example.com")
    owner.get_by_role("button", name="Send invitation").click()
    bob = owner.locator('tr[data-email="bob@example.com"]')
    expect(bob.locator("[data-status]")).to_have_text("SENT", timeout=30_000)
    first = link_in(mail_worker.messages[1])
    bob.get_by_role("button", name="Revoke the invitation to bob@example.com").click()
    confirm = bob.get_by_role("group", name="Revoke the invitation to bob@example.com?")
    expect(confirm.get_by_role("button", name="Yes, revoke")).to_be_focused()
    both_themes_accessible(owner, "invitations (revoke?)")
    confirm.get_by_role("button", name="Yes, revoke").click()
    expect(bob.locator("[data-status]")).to_have_text("REVOKED")
    revoked = contexts.page()
    revoked.goto(first)
    expect(revoked.get_by_role("heading", name="This invitation was revoked")).to_be_visible()
    bob.get_by_role("button", name="Resend the invitation to bob@example.com").click()
    expect(bob.locator("[data-status]")).to_have_text("SENT", timeout=30_000)
    assert link_in(mail_worker.messages[2]) != first
    expect(owner.locator("tbody tr")).to_have_count(2)  # one row per address
    owner.emulate_media(color_scheme="light")
    shoot(owner, "invitations", tmp_path)
