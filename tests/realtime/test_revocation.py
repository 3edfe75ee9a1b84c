"""A token that stops working stops everywhere: open sockets are closed with 4403 (on every API
process within a second of a revocation, at the instant of expiry, on the next subscribe and on
the periodic re-check). The socket carries subscriptions only, at most a tenant's cap of them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, func, select

from outlive.cli.tokens import revoke_token
from outlive.config import Settings
from outlive.db.models import ApiToken, Run
from outlive.db.tx import Sessions
from outlive.services.tenants import create_token
from tests.conftest import make_settings
from tests.realtime.clients import ApiProcess, Socket, serve
from tests.support import Api, Servers, TenantHandle, service_env

VIEWER = "{ viewer { tenant { slug } } }"


async def _another_token(
    sessions: Sessions, tenant: TenantHandle, expires_in: timedelta | None = None
) -> TenantHandle:
    async with sessions.unit() as uow:
        principal, token = await create_token(
            uow,
            tenant_slug=tenant.principal.tenant.slug,
            email=tenant.principal.user.email,
            expires_in=expires_in,
        )
    return TenantHandle(principal=principal, token=token)


async def _outlive(*args: str, env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "outlive.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    return await process.wait(), output.decode()


@contextlib.asynccontextmanager
async def _graphql(url: str) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield Api(client)


async def test_a_revoked_token_closes_its_sockets_on_every_api_process_at_once(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    kept = await _another_token(sessions, tenant)
    env = service_env(settings)
    async with (
        ApiProcess.running(env) as one,
        ApiProcess.running(env) as two,
        Socket.open(one.url, token=tenant.token) as on_one,
        Socket.open(two.url, token=tenant.token) as on_two,
        Socket.open(two.url, token=kept.token) as other_token,
        _graphql(one.url) as api_one,
        _graphql(two.url) as api_two,
    ):
        for sock in (on_one, on_two, other_token):
            await sock.subscribe()
        for api in (api_one, api_two):  # each process now has the principal cached
            assert await api.gql(VIEWER, token=tenant.token)
        status, output = await _outlive(
            "token", "revoke", str(tenant.principal.token_id), env={**os.environ, **env}
        )
        assert status == 0, output
        assert "2 API process(es)" in output
        # The periodic re-check is 30 s away: only the announcement can close them this soon.
        closes = await asyncio.gather(on_one.closed(timeout=5), on_two.closed(timeout=5))
        assert [code for code, _ in closes] == [4403, 4403]
        await other_token.sync()  # another token of the same tenant is untouched
        for api in (api_one, api_two):  # and neither cache still knows the revoked token
            response = await api.post(VIEWER, token=tenant.token)
            assert response.status_code == 401
            assert await api.gql(VIEWER, token=kept.token)


async def test_the_periodic_recheck_closes_a_socket_whose_token_was_deleted(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    """No announcement at all (the row was deleted by hand): the re-check still finds it."""
    settings = make_settings(servers, ws_recheck_s=0.2)
    async with serve(settings) as served, Socket.open(served.url, token=tenant.token) as sock:
        await sock.subscribe()
        async with sessions.unit() as uow:
            await uow.session.execute(
                delete(ApiToken).where(ApiToken.id == tenant.principal.token_id)
            )
        assert (await sock.closed(timeout=5))[0] == 4403


async def test_every_subscribe_rechecks_the_token(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, auth_cache_s=0)
    async with serve(settings) as served, Socket.open(served.url, token=tenant.token) as sock:
        await sock.subscribe()
        async with sessions.unit() as uow:
            await uow.session.execute(
                delete(ApiToken).where(ApiToken.id == tenant.principal.token_id)
            )
        await sock.send({"type": "subscribe", "id": "2", "payload": {"query": _PLAIN}})
        assert (await sock.closed(timeout=5))[0] == 4403


_PLAIN = "subscription { nudges { type } }"


async def test_a_socket_closes_when_its_token_expires(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    short = await _another_token(sessions, tenant, expires_in=timedelta(seconds=1))
    async with serve(settings) as served, Socket.open(served.url, token=short.token) as sock:
        await sock.subscribe()
        assert (await sock.closed(timeout=10))[0] == 4403
        async with _graphql(served.url) as api:
            assert (await api.post(VIEWER, token=short.token)).status_code == 401


@pytest.mark.parametrize(
    "query",
    [
        VIEWER,
        'mutation { startRun(input: {agent: "demo"}) { run { id } } }',
        "subscription { nudges { type } } query Q { viewer { user { email } } }",
    ],
)
async def test_queries_and_mutations_go_over_http_not_the_socket(
    served: Any, sessions: Sessions, tenant: TenantHandle, query: str
) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        payload: dict[str, Any] = {"query": query}
        if query.startswith("subscription"):
            payload["operationName"] = "Q"
        await sock.send({"type": "subscribe", "id": "1", "payload": payload})
        frame = await sock.receive()
        assert frame["type"] == "error", frame
        (error,) = frame["payload"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert "over the socket" in error["message"]
        await sock.sync()  # the socket itself stays open
    found = await sessions.one(
        select(func.count().label("n")).select_from(Run).where(Run.tenant_id == tenant.id)
    )
    assert found is not None
    assert found["n"] == 0


async def test_a_tenant_gets_at_most_its_cap_of_sockets(
    servers: Servers, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    settings = make_settings(servers, ws_max_per_tenant=2)
    async with serve(settings) as served, contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(Socket.open(served.url, token=tenant.token))
        await first.subscribe()
        await stack.enter_async_context(Socket.open(served.url, token=tenant.token))
        async with Socket.open(served.url) as third:
            await third.send(
                {"type": "connection_init", "payload": {"authorization": f"Bearer {tenant.token}"}}
            )
            assert (await third.closed())[0] == 1013
        other = await stack.enter_async_context(Socket.open(served.url, token=other_tenant.token))
        await other.subscribe()  # another tenant is not affected
        await served.subscribers(2)
        await first.ws.close()
        await served.subscribers(1)  # its subscription, and before it its registration, are gone
        async with Socket.open(served.url, token=tenant.token) as again:  # a slot came free
            await again.subscribe()


async def test_with_realtime_off_a_revocation_still_closes_sockets_at_once(
    servers: Servers, tenant: TenantHandle
) -> None:
    """Nudges off, the control channel still on: the hub listens to revocations only."""
    settings = make_settings(servers, realtime=False)
    assert settings.database_url is not None
    assert settings.redis_url is not None
    async with serve(settings) as served, Socket.open(served.url, token=tenant.token) as sock:
        await sock.subscribe()
        line = await revoke_token(settings, str(tenant.principal.token_id))
        assert "1 API process(es)" in line
        assert (await sock.closed(timeout=5))[0] == 4403
