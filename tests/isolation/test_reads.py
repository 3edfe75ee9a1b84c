"""What one tenant's reads may take from the others (security review round 4: M3, M4, L1, I5).

Each test fails on the code before it: an answer had no byte bound (the review's 30-alias query
got 187 MiB), statements had no timeout and no per-tenant share of the pool, out-of-range values
answered 500 with an ERROR carrying the argument's repr, and a 503 had no `Retry-After`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import asyncpg
import pytest

from outlive.db.tx import Sessions
from outlive.graphql.http import Answer, send_answer
from tests.conftest import make_settings
from tests.support import Api, Servers, TenantHandle

BIG = " ".join(
    f"a{i}: runs(first: 100) {{ edges {{ node {{ output }} }} }}" for i in range(30)
)  # the review's query: 30 aliases (the alias limit), a cost of 9,000 (under 20,000)


async def _insert_big_runs(servers: Servers, tenant: TenantHandle, count: int) -> None:
    """`count` settled runs whose output holds ~60 KB of text that does not compress away."""
    conn = await asyncpg.connect(servers.database_url)
    try:
        await conn.execute(
            """INSERT INTO runs (tenant_id, agent, status, input, output, finished_at)
               SELECT $1, 'demo', 'SUCCEEDED', '{}'::jsonb,
                      jsonb_build_object('blob', (SELECT string_agg(md5(random()::text || g), '')
                                                    FROM generate_series(1, 1900) g WHERE n > 0)),
                      now()
                 FROM generate_series(1, $2) n""",
            tenant.id,
            count,
        )
    finally:
        await conn.close()


async def test_an_answer_past_the_byte_budget_is_refused_whole_with_a_code(
    servers: Servers, tenant: TenantHandle
) -> None:
    await _insert_big_runs(servers, tenant, 100)
    async with Api.running(make_settings(servers)) as api:  # the default budget (4 MiB)
        response = await api.post(f"{{ {BIG} }}", token=tenant.token)
        assert response.status_code == 200
        body = response.json()
        assert body["data"] is None  # never a truncated answer
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert "OUTLIVE_MAX_RESPONSE_BYTES" in error["message"]
        assert len(response.content) < 1024
        # Ten of them at once (distinct variables: ten executions): every one refused, and
        # the process grew by far less than 256 MiB (before: 10 x 187 MiB of answers).
        varied = "query($n: Int!) { " + BIG.replace("first: 100", "first: $n") + " }"
        base = _reset_peak_rss()
        answers = await asyncio.gather(
            *(api.post(varied, {"n": 91 + i}, token=tenant.token) for i in range(10))
        )
        assert all(a.json()["data"] is None for a in answers)
        assert _peak_rss() - base < 128 * 1024 * 1024
        page = await api.gql(
            "{ runs(first: 20) { edges { node { output } } } }", token=tenant.token
        )
        assert len(page["runs"]["edges"]) == 20  # ~1.2 MB: within the budget


async def test_a_statement_past_the_timeout_answers_query_timeout(
    servers: Servers, tenant: TenantHandle, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(servers, api_statement_timeout_s=0.5)
    holder = await asyncpg.connect(servers.database_url)
    try:
        async with Api.running(settings) as api:
            await api.gql("{ viewer { tenant { id } } }", token=tenant.token)  # warm the pools
            tx = holder.transaction()
            await tx.start()
            await holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            async with asyncio.timeout(20):  # today: waits for the lock for ever
                response = await api.post(
                    "{ runs(first: 1) { edges { node { id } } } }", token=tenant.token
                )
            await tx.rollback()
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "QUERY_TIMEOUT"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    finally:
        await holder.close()


async def test_one_tenant_holds_at_most_its_share_of_the_pool(
    servers: Servers, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    """Tenant A's 12 blocked reads take 2 of the pool's 10 connections; B's read answers."""
    settings = make_settings(
        servers, api_tenant_max_reads=2, db_raw_pool_size=10, api_statement_timeout_s=0
    )
    holder = await asyncpg.connect(servers.database_url)
    try:
        async with Api.running(settings) as api:
            await api.gql("{ viewer { tenant { id } } }", token=other_tenant.token)
            await api.gql("{ viewer { tenant { id } } }", token=tenant.token)
            tx = holder.transaction()
            await tx.start()
            await holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            theirs = [
                asyncio.ensure_future(
                    api.post(
                        "query($n: Int!) { runs(first: $n) { edges { node { id } } } }",
                        {"n": n},  # distinct variables: not one shared execution
                        token=tenant.token,
                    )
                )
                for n in range(1, 13)
            ]
            async with asyncio.timeout(20):  # today: B waits for a pooled connection (30 s)
                await _until_lock_waiters(holder)
                await asyncio.sleep(0.5)  # A's other requests reach as far as they may go
                ours = await api.gql("{ webhookEndpoints { id } }", token=other_tenant.token)
            assert ours == {"webhookEndpoints": []}
            assert await _lock_waiters(holder) <= 2  # A's others wait for A's own slots
            await tx.rollback()
            answers = await asyncio.gather(*theirs)
            assert all(a.status_code == 200 and "errors" not in a.json() for a in answers)
    finally:
        await holder.close()


async def _lock_waiters(conn: asyncpg.Connection) -> int:
    waiting: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    )
    return waiting


async def _until_lock_waiters(conn: asyncpg.Connection) -> None:
    """Until a statement waits for the lock (PostgreSQL has no event to await for this)."""
    for _ in range(400):
        if await _lock_waiters(conn):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no statement ever waited for the lock")


def _status() -> dict[str, int]:
    with open("/proc/self/status") as status:  # kB
        rows = (line.split(":", 1) for line in status if line.startswith(("VmRSS", "VmHWM")))
        return {key: int(value.split()[0]) * 1024 for key, value in rows}


def _reset_peak_rss() -> int:
    """This process's RSS now, with its peak reset to it (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    return _status()["VmRSS"]


def _peak_rss() -> int:
    return _status()["VmHWM"]


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        (
            "query($a: String!) { runs(first: 1, after: $a) { edges { node { id } } } }",
            {"a": _cursor("0001-01-01T00:00:00+01:00|0b4d3f0e-0000-4000-8000-000000000000")},
        ),
        (
            "query($a: String!) { runs(first: 1, after: $a) { edges { node { id } } } }",
            {"a": _cursor("9999-12-31T23:59:59-01:00|0b4d3f0e-0000-4000-8000-000000000000")},
        ),
        (
            "query($s: DateTime!) { runs(first: 1, createdSince: $s) { edges { node { id } } } }",
            {"s": "0001-01-01T00:00:00+01:00"},
        ),
        (
            "query($s: DateTime!) { runs(first: 1, createdBefore: $s) { edges { node { id } } } }",
            {"s": "9999-12-31T23:59:59-01:00"},
        ),
        (
            "mutation($s: DateTime!) { replayRuns(filter: {since: $s}) { id } }",
            {"s": "0001-01-01T00:00:00+01:00"},
        ),
        ('mutation { startRun(input: {agent: "demo", input: {turns: 1e999}}) { created } }', None),
    ],
)
async def test_out_of_range_values_answer_bad_user_input_and_log_no_values(
    api: Api,
    tenant: TenantHandle,
    caplog: pytest.LogCaptureFixture,
    query: str,
    variables: dict[str, Any] | None,
) -> None:
    response = await api.post(query, variables, token=tenant.token)
    assert response.status_code == 200
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "datetime.datetime(" not in caplog.text


async def test_an_infinite_number_in_a_signal_is_refused_before_a_token_is_taken(
    servers: Servers, tenant: TenantHandle, sessions: Sessions, caplog: pytest.LogCaptureFixture
) -> None:
    async with Api.running(make_settings(servers, rate_signal_run="1/3600")) as api:
        run_id = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
        literal = f'mutation {{ signalRun(input: {{id: "{run_id}", name: "zz", payload: {{a: 1e999}}}}) {{ accepted }} }}'  # noqa: E501
        response = await api.post(literal, token=tenant.token)
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        ok = f'mutation {{ signalRun(input: {{id: "{run_id}", name: "zz", payload: {{a: 1}}}}) {{ accepted }} }}'  # noqa: E501
        assert (await api.gql(ok, token=tenant.token))["signalRun"]["accepted"]  # token left
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_503_carries_a_retry_after_header() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await send_answer(send, Answer(503, b"{}"))
    headers = dict(sent[0]["headers"])
    assert headers[b"retry-after"] == b"2"
