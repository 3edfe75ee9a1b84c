"""An invitation mails exactly one mailbox, and the per-address limit counts that mailbox
(issue 19, item 1): a `,` in the address once added recipients (six mails to one victim against
a limit of three, `RCPT TO:<postmaster>`), because the address check let it through and the mail
library read the recipients back from the `To:` header. A real SMTP server on loopback records
every `RCPT TO`."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from sqlalchemy import select

from outlive.config import Settings
from outlive.db.models import Invitation, InvitationStatus
from outlive.db.tx import Sessions
from outlive.ids import InvitationId, TenantId
from outlive.jobs.mailer import SmtpMailer, create_mailer
from outlive.services.invitations import Outgoing, compose
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle

INVITE = "mutation($e: String!) { inviteMember(email: $e) { id email status } }"
INVITATIONS = "{ invitations { id email status lastError } }"


class Recorder:
    """Records every RCPT TO the server is given, and every message's envelope recipients."""

    def __init__(self) -> None:
        self.rcpt: list[str] = []
        self.delivered: list[list[str]] = []

    async def handle_RCPT(  # noqa: N802 (aiosmtpd's hook name)
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        self.rcpt.append(address)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(  # noqa: N802
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        self.delivered.append(list(envelope.rcpt_tos))
        return "250 OK"


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, int]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    handler = Recorder()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    yield handler, port
    controller.stop()


def _code(response: Any) -> str:
    (error,) = response.json()["errors"]
    return str(error["extensions"]["code"])


async def test_a_comma_in_an_address_never_adds_a_recipient(
    servers: Servers,
    jobs_world: Any,
    recorder: tuple[Recorder, int],
    sessions: Sessions,
    tenant: TenantHandle,
) -> None:
    inbox, port = recorder
    settings = make_settings(servers, rate_invite="off", rate_invite_recipient="3/3600")
    async with Api.running(settings) as api:
        for i in range(6):
            response = await api.post(INVITE, {"e": f"x{i},target@victim.test"}, token=tenant.token)
            assert _code(response) == "BAD_USER_INPUT"
        for hostile in (
            "postmaster,admin@victim.test",
            "Admin <admin@victim.test>",
            "a@[10.0.0.1]",
        ):
            response = await api.post(INVITE, {"e": hostile}, token=tenant.token)
            assert _code(response) == "BAD_USER_INPUT"
        async with (
            jobs_world(smtp_url=f"smtp://127.0.0.1:{port}") as world,
            NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
        ):
            await api.gql(INVITE, {"e": "Target@Victim.test"}, token=tenant.token)
            await watch.until_true(
                lambda: _first_status(api, tenant, "SENT"), 30, "the one invitation SENT"
            )
    assert inbox.rcpt == ["target@victim.test"]
    assert inbox.delivered == [["target@victim.test"]]


async def _first_status(api: Api, tenant: TenantHandle, status: str) -> dict[str, Any] | None:
    found = (await api.gql(INVITATIONS, token=tenant.token))["invitations"]
    return found[0] if found and found[0]["status"] == status else None


async def test_the_per_address_limit_counts_the_mailbox_not_its_spelling(
    servers: Servers, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, rate_invite="off", rate_invite_recipient="3/3600")
    async with Api.running(settings) as api:
        for spelling in ("target@victim.test", " TARGET@victim.test", "target+1@Victim.Test"):
            await api.gql(INVITE, {"e": spelling}, token=tenant.token)
        response = await api.post(INVITE, {"e": "target+2@victim.test"}, token=tenant.token)
        assert _code(response) == "RATE_LIMITED"
        await api.gql(INVITE, {"e": "other@victim.test"}, token=tenant.token)  # its own bucket


async def test_a_stored_address_with_a_comma_is_failed_and_never_mailed(
    jobs_world: Any, recorder: tuple[Recorder, int], sessions: Sessions, tenant: TenantHandle
) -> None:
    """A row written before the check was strict: the job parses the address again."""
    inbox, port = recorder
    async with jobs_world(smtp_url=f"smtp://127.0.0.1:{port}") as world:
        async with sessions.unit() as uow:
            row = Invitation(
                tenant_id=tenant.id, email="x0,target@victim.test", token_hash=b"\0" * 32
            )
            uow.session.add(row)
            await uow.session.flush()
            invitation_id = row.id
        async with NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch:
            assert world.host.deps is not None
            await world.host.deps.jobs.sessions.admission.dispatch_jobs(tenant.id)

            async def failed() -> Invitation | None:
                async with sessions.unit() as uow:
                    found = await uow.session.scalar(
                        select(Invitation).where(Invitation.id == invitation_id)
                    )
                ok = found is not None and found.status == InvitationStatus.FAILED.value
                return found if ok else None

            settled = await watch.until_true(failed, 30, "the invitation FAILED")
    assert settled.last_error == "invalid address"
    assert inbox.rcpt == []


async def test_the_mailer_sends_to_the_given_recipients_whatever_the_to_header_says(
    recorder: tuple[Recorder, int],
) -> None:
    inbox, port = recorder
    message = EmailMessage()
    message["From"] = "Outlive <no-reply@outlive.local>"
    message["To"] = "x0@victim.test, target@victim.test"
    message["Subject"] = "hello"
    message.set_content("hi")
    await SmtpMailer(f"smtp://127.0.0.1:{port}").send(message, recipients=["x0@victim.test"])
    assert inbox.rcpt == ["x0@victim.test"]


@pytest.mark.parametrize("dev", [False, True])
async def test_the_log_mailer_withholds_invitation_codes_outside_outlive_dev(
    caplog: pytest.LogCaptureFixture, dev: bool
) -> None:
    """Issue 39, I5: with no SMTP server, a production worker logs the email without its code,
    a credential; `outlive dev` (OUTLIVE_MAIL_LOG_LINKS) keeps the link to click."""
    outgoing = Outgoing(
        id=InvitationId(uuid.uuid4()),
        tenant_id=TenantId(uuid.uuid4()),
        email="ann@example.com",
        tenant_name="Acme",
        token="SECRET-CODE-123",
    )
    message = compose(outgoing, sender="o@x.test", public_url="https://o.example")
    mailer = create_mailer(Settings(mail_log_links=dev))
    with caplog.at_level(logging.INFO, logger="outlive.jobs.mailer"):
        await mailer.send(message, recipients=["ann@example.com"])
    logged = "\n".join(r.getMessage() for r in caplog.records)

    assert ("SECRET-CODE-123" in logged) is dev
    assert "ann@example.com" in logged  # the email is still there, to see it was "sent"
    assert ("withheld" in logged) is not dev
