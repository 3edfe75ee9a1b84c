"""A stalled client does not grow the server's memory while nudges keep coming: its socket holds at
most one pending copy of each (type, id), measured on a real `outlive api` process."""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from outlive.config import Settings
from outlive.realtime.hub import MAX_PENDING
from outlive.realtime.nudges import Nudge, Publisher
from tests.realtime.clients import ApiProcess, Socket, publisher
from tests.support import TenantHandle, service_env

DISTINCT = 64  # fewer than MAX_PENDING: coalesced, so the stalled socket is never closed
PER_BATCH = 8
GROWTH_LIMIT_KIB = 4096  # ~51,000 queued nudges would be ~25 MiB; coalesced they are 64


def nudge(tenant: TenantHandle, id: uuid.UUID) -> Nudge:
    return Nudge("run.updated", tenant.id, datetime.now(UTC), id)


async def flood(
    pub: Publisher, tenant: TenantHandle, ids: list[uuid.UUID], batches: int, probe: Probe
) -> None:
    """Publish, then wait until the API has dispatched all of it: the probe (another tenant) hears
    a marker published last, and the API's one subscription delivers in order."""
    for _ in range(batches):
        await pub.send([nudge(tenant, i) for i in ids] * PER_BATCH)
    marker = uuid.uuid4()
    await pub.send([nudge(probe.tenant, marker)])
    await probe.socket.nudge_where(id=str(marker))


@dataclass
class Probe:
    socket: Socket
    tenant: TenantHandle


async def test_a_stalled_client_does_not_grow_the_servers_memory(
    settings: Settings, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    assert DISTINCT < MAX_PENDING
    ids = [uuid.uuid4() for _ in range(DISTINCT)]
    async with ApiProcess.running(service_env(settings)) as api, publisher(settings) as pub:
        await api.saw(r"realtime: subscribed to ")
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(("127.0.0.1", int(api.url.rsplit(":", 1)[1])))
        async with (
            Socket.open(api.url, token=tenant.token, sock=raw, max_queue=1) as stalled,
            Socket.open(api.url, token=other_tenant.token) as probe,
        ):
            await stalled.subscribe()
            await probe.subscribe()
            stalled.ws.transport.pause_reading()
            await flood(
                pub, tenant, ids, 10, Probe(probe, other_tenant)
            )  # fills every buffer on the way; warms up
            before = api.rss_kib()
            await flood(
                pub, tenant, ids, 100, Probe(probe, other_tenant)
            )  # 51,200 more nudges for the stalled socket
            grown = api.rss_kib() - before
            assert grown < GROWTH_LIMIT_KIB, f"the API grew {grown} KiB"

            # It was never too far behind: still subscribed, and it hears what comes next.
            stalled.ws.transport.resume_reading()
            last = uuid.uuid4()
            await pub.send([nudge(tenant, last)])
            assert await stalled.nudge_where(id=str(last), timeout=60)
