"""What a socket hears: its own tenant's nudges, and nothing but the four keys of contract §5."""

from __future__ import annotations

from datetime import datetime

from tests.realtime.clients import NUDGE_KEYS, Served, Socket
from tests.support import Api, TenantHandle


async def test_a_nudge_is_exactly_type_tenant_id_at_and_id(
    served: Served, http: Api, tenant: TenantHandle
) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.subscribe()
        started = await http.start_run(tenant.token, input={"turns": 1, "delayMs": 0})
        nudge = await sock.next_nudge()

    assert set(nudge) == NUDGE_KEYS
    assert nudge["type"] == "run.created"
    assert nudge["tenantId"] == str(tenant.id)
    assert nudge["id"] == started["run"]["id"]
    at = datetime.fromisoformat(nudge["at"])
    assert at.utcoffset() is not None  # ISO 8601 with offset
    created = datetime.fromisoformat(started["run"]["createdAt"])
    assert abs((at - created).total_seconds()) < 60


async def test_beta_never_hears_alpha(
    served: Served, http: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    async with (
        Socket.open(served.url, token=tenant.token) as alpha,
        Socket.open(served.url, token=other_tenant.token) as beta,
    ):
        await alpha.subscribe()
        await beta.subscribe()
        for _ in range(3):
            run = (await http.start_run(tenant.token, input={"turns": 1}))["run"]
            await http.cancel(tenant.token, run["id"])
        assert (await alpha.next_nudge())["tenantId"] == str(tenant.id)

        # Anything alpha's changes had leaked to beta would be in beta's stream before this.
        own = (await http.start_run(other_tenant.token, input={"turns": 1}))["run"]
        first = await beta.next_nudge()
        assert first == {**first, "type": "run.created", "id": own["id"]}
        assert first["tenantId"] == str(other_tenant.id)
