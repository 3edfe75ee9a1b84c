"""Per-tenant bounds on what is kept and what is written (security review round 4: M1, L7, L8,
I2, I6). Each test fails on the code before it: the mailbox took any number of signals, dots
made new Gmail recipients, `replayRuns` had no bucket and its rows were never pruned, the
metrics listener bound 0.0.0.0 silently, and the webhook client read with httpx's 5 s timeout."""

from __future__ import annotations

import logging
import socket
from typing import Any

import asyncpg
import pytest

from outlive.db.tx import Sessions
from outlive.jobs.handlers.webhook_deliver_v1 import create_client
from outlive.jobs.telemetry import serve_metrics
from outlive.services import retention
from outlive.services.addresses import recipient_key
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, Servers, TenantHandle

SIGNAL = """mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted } }"""
BLOB = "x" * 60_000


async def _signal(api: Api, token: str, run_id: str, payload: Any) -> bool:
    data = await api.gql(
        SIGNAL, {"i": {"id": run_id, "name": "junk", "payload": payload}}, token=token
    )
    return bool(data["signalRun"]["accepted"])


async def test_a_runs_mailbox_is_bounded_in_count(servers: Servers, tenant: TenantHandle) -> None:
    async with Api.running(make_settings(servers, signal_mailbox_max=3)) as api:
        run_id = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
        for i in range(3):
            assert await _signal(api, tenant.token, run_id, {"i": i})
        with pytest.raises(GraphQLError) as refused:
            await _signal(api, tenant.token, run_id, {"i": 3})
        assert refused.value.codes == ["BAD_USER_INPUT"]
        assert "mailbox is full" in refused.value.errors[0]["message"]


async def test_a_runs_mailbox_is_bounded_in_bytes_and_pruned_once_it_settles(
    servers: Servers, tenant: TenantHandle, sessions: Sessions
) -> None:
    settings = make_settings(servers, signal_mailbox_bytes=128 * 1024)
    async with Api.running(settings) as api:
        run_id = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
        assert await _signal(api, tenant.token, run_id, {"blob": BLOB})
        assert await _signal(api, tenant.token, run_id, {"blob": BLOB})
        with pytest.raises(GraphQLError) as refused:
            await _signal(api, tenant.token, run_id, {"blob": BLOB})
        assert refused.value.codes == ["BAD_USER_INPUT"]
        await api.cancel(tenant.token, run_id)  # QUEUED: settles CANCELLED at once
    assert await retention.prune_settled_signals(sessions) >= 2
    conn = await asyncpg.connect(servers.database_url)
    try:
        left = "SELECT count(*) FROM run_signals WHERE tenant_id = $1"
        assert await conn.fetchval(left, tenant.id) == 0
    finally:
        await conn.close()


def test_gmail_dot_variants_share_one_recipient_bucket() -> None:
    keys = {
        recipient_key(a)
        for a in (
            "target@gmail.com",
            "t.arget@gmail.com",
            "ta.rget@gmail.com",
            "t.a.rget+x@gmail.com",
            "Tar.Get@googlemail.com",
        )
    }
    assert keys == {"target@gmail.com"}
    assert recipient_key("t.arget@victim.test") != recipient_key("target@victim.test")


async def test_replay_runs_takes_from_a_bucket_and_finished_replays_are_pruned(
    servers: Servers, tenant: TenantHandle, sessions: Sessions
) -> None:
    replay = 'mutation { replayRuns(filter: {agent: "demo"}) { id status } }'
    async with Api.running(make_settings(servers, rate_replay_runs="2/3600")) as api:
        for _ in range(2):
            await api.gql(replay, token=tenant.token)
        with pytest.raises(GraphQLError) as limited:
            await api.gql(replay, token=tenant.token)
        assert limited.value.codes == ["RATE_LIMITED"]
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(
            "UPDATE run_replays SET status = 'DONE', created_at = now() - interval '40 days'"
            " WHERE tenant_id = $1",
            tenant.id,
        )
        assert await retention.prune_replays(sessions, days=30) == 2
        assert (
            await conn.fetchval("SELECT count(*) FROM run_replays WHERE tenant_id = $1", tenant.id)
            == 0
        )
    finally:
        await conn.close()


def test_the_webhook_client_reads_under_the_attempts_deadline_only() -> None:
    """httpx's default 5 s read timeout cut a 9 s answer short of the documented 10 s."""
    client = create_client()
    assert client.timeout.read is None
    assert client.timeout.connect is None


def test_an_unauthenticated_metrics_listener_off_loopback_is_announced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with caplog.at_level(logging.WARNING):
        server = serve_metrics(port, "0.0.0.0")  # noqa: S104 (the contract's default)
    try:
        assert "without authentication" in caplog.text
    finally:
        server.shutdown()
        server.server_close()
    caplog.clear()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = serve_metrics(port, "127.0.0.1")
    server.shutdown()
    server.server_close()
    assert "without authentication" not in caplog.text
