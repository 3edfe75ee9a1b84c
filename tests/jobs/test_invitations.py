"""Invitation emails through a real SMTP server on loopback; the queue down at enqueue time."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from redis.exceptions import RedisError

from outlive.db.tx import Sessions
from outlive.jobs.queues import JOBS_QUEUE, create_queue
from outlive.jobs.redis import is_cluster_url
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle

INVITATIONS = "{ invitations { id email status createdAt sentAt lastError } }"
INVITE = "mutation($e: String!) { inviteMember(email: $e) { id email status } }"


class Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], Message]] = []
        self.refuse = 0
        self.refusal = "451 try again later"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        if self.refuse:
            self.refuse -= 1
            return self.refusal
        self.messages.append((list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


async def _until_status(api: Api, watch: NudgeWatch, token: str, status: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = (await api.gql(INVITATIONS, token=token))["invitations"]
        return found[0] if found and found[0]["status"] == status else None

    return await watch.until_true(check, 30, f"an invitation {status}")


async def test_an_invitation_email_arrives_with_the_recipient_and_link(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, smtp: Any
) -> None:
    inbox, port = smtp
    inbox.refuse = 1  # the first try is refused: retried, then sent
    async with (
        jobs_world(
            smtp_url=f"smtp://127.0.0.1:{port}",
            job_retry_base_s=0.1,
            public_url="https://outlive.example",
        ) as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        invited = await api.gql(INVITE, {"e": "New.Person@Example.com"}, token=tenant.token)
        assert invited["inviteMember"]["status"] == "PENDING"
        sent = await _until_status(api, watch, tenant.token, "SENT")
        await watch.saw("invitation.updated")
    assert sent["email"] == "new.person@example.com"
    assert sent["sentAt"]
    ((recipients, message),) = inbox.messages
    assert recipients == ["new.person@example.com"]
    assert message["To"] == "new.person@example.com"
    assert tenant.principal.tenant.name in message["Subject"]
    body = message.get_payload(decode=True).decode()
    assert "https://outlive.example/#invitation=" in body
    assert {e["type"] for e in watch.seen} == {"invitation.updated"}


async def test_an_unreachable_smtp_server_ends_failed(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here
    async with (
        jobs_world(
            smtp_url=f"smtp://127.0.0.1:{port}", job_retry_base_s=0.05, job_max_attempts=2
        ) as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        await api.gql(INVITE, {"e": "a@b.example"}, token=tenant.token)
        failed = await _until_status(api, watch, tenant.token, "FAILED")
    assert failed["sentAt"] is None
    assert failed["lastError"]


async def test_a_bad_address_is_bad_user_input(api: Api, tenant: TenantHandle) -> None:
    response = await api.post(INVITE, {"e": "not an address"}, token=tenant.token)
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert (await api.gql(INVITATIONS, token=tenant.token))["invitations"] == []


async def test_the_queue_down_at_enqueue_time_leaves_the_invitation_pending_for_the_relay(
    servers: Servers, tenant: TenantHandle
) -> None:
    async with Api.running(make_settings(servers)) as api:
        view = next(
            r.app
            for r in api.client._transport.app.router.routes  # type: ignore[attr-defined]
            if getattr(r, "path", "") == "/graphql"
        )
        producer = view.services.sessions.jobs
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]  # nothing listens there once it is closed
        # The jobs queue's Redis gone: the one Redis, or on a cluster every node of it.
        nowhere = (
            f"redis+cluster://127.0.0.1:{port}/"
            if is_cluster_url(servers.redis_url)
            else f"redis://127.0.0.1:{port}/0"
        )
        live, producer.queue = producer.queue, create_queue(nowhere, JOBS_QUEUE)
        try:
            response = await api.post(INVITE, {"e": "x@y.example"}, token=tenant.token)
        finally:
            down, producer.queue = producer.queue, live
            with contextlib.suppress(RedisError):  # saq's close unsubscribes, there too
                await down.disconnect()
        assert "errors" not in response.json()  # PostgreSQL alone records the work (contract §3)
        (invitation,) = (await api.gql(INVITATIONS, token=tenant.token))["invitations"]
    assert invitation["status"] == "PENDING"
    assert invitation["lastError"] is None


async def test_the_smtp_servers_own_words_never_reach_the_tenant(
    api: Api, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, smtp: Any
) -> None:
    inbox, port = smtp
    inbox.refuse, inbox.refusal = 5, "554 relay denied by mx7.corp.internal (10.2.3.4)"
    async with (
        jobs_world(smtp_url=f"smtp://127.0.0.1:{port}", job_max_attempts=1) as world,
        NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        await api.gql(INVITE, {"e": "a@b.example"}, token=tenant.token)
        failed = await _until_status(api, watch, tenant.token, "FAILED")
    assert failed["lastError"] == "mail server answered 554"


async def test_inviting_an_address_again_hands_back_its_pending_invitation(
    servers: Servers, jobs_world: Any, sessions: Sessions, tenant: TenantHandle, smtp: Any
) -> None:
    """20 invitations to one address in under a second: one row, one email (issue 10, item 8)."""
    inbox, port = smtp
    settings = make_settings(servers, rate_invite="off", rate_invite_recipient="off")
    async with Api.running(settings) as api:
        answers = await asyncio.gather(
            *(api.gql(INVITE, {"e": "Same@B.example"}, token=tenant.token) for _ in range(20))
        )
        assert len({a["inviteMember"]["id"] for a in answers}) == 1
        async with (
            jobs_world(smtp_url=f"smtp://127.0.0.1:{port}") as world,
            NudgeWatch(world.settings.redis_url or "", sessions, tenant.id) as watch,
        ):
            await _until_status(api, watch, tenant.token, "SENT")
        (invitation,) = (await api.gql(INVITATIONS, token=tenant.token))["invitations"]
        assert invitation["id"] == answers[0]["inviteMember"]["id"]
        assert len(inbox.messages) == 1
        again = await api.gql(INVITE, {"e": "same@b.example"}, token=tenant.token)
        assert again["inviteMember"]["id"] != invitation["id"]  # once sent, a new one may go
