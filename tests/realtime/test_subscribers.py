"""A subscriber in direct mode: frames are sent from the fan-out loop, eagerly; a send that must
wait becomes a task and what arrives meanwhile is coalesced behind it, in order."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from outlive.realtime.nudges import Nudge
from outlive.realtime.subscribers import (
    CLOSE_TRY_AGAIN,
    Delivery,
    Subscriber,
    SubscriberClosed,
)


def delivery(tenant: uuid.UUID, id: uuid.UUID | None = None) -> Delivery:
    return Delivery(Nudge("run.updated", tenant, datetime.now(UTC), id or uuid.uuid4()))


class Socket:
    """A sink that takes frames at once while `writable` is set, and waits for it otherwise."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()
        self.sent: list[uuid.UUID | None] = []
        self.closed: list[SubscriberClosed] = []
        self.arrived = asyncio.Event()

    async def send(self, item: Delivery) -> None:
        await self.writable.wait()
        self.sent.append(item.nudge.id)
        self.arrived.set()


async def until_sent(socket: Socket, count: int) -> None:
    async with asyncio.timeout(10):
        while len(socket.sent) < count:
            socket.arrived.clear()
            await socket.arrived.wait()


async def test_a_writable_socket_takes_its_frame_synchronously() -> None:
    tenant, socket = uuid.uuid4(), Socket()
    subscriber = Subscriber(tenant)
    subscriber.attach(socket.send, socket.closed.append)
    first = delivery(tenant)
    assert subscriber.offer(first)
    assert socket.sent == [first.nudge.id]  # no task, no turn of the loop
    assert subscriber.backlog == 0


async def test_a_send_that_waits_queues_the_rest_coalesced_and_in_order() -> None:
    tenant, socket = uuid.uuid4(), Socket()
    subscriber = Subscriber(tenant)
    subscriber.attach(socket.send, socket.closed.append)
    socket.writable.clear()  # the socket's buffer is full
    ids = [uuid.uuid4() for _ in range(3)]
    for id in [*ids, ids[0]]:  # ids[0] again: replaces its pending copy, at the back
        assert subscriber.offer(delivery(tenant, id))
    assert socket.sent == []
    assert subscriber.backlog == 3  # ids[0] in flight; ids[1], ids[2] and ids[0] again wait
    socket.writable.set()
    await until_sent(socket, 4)
    assert socket.sent == [ids[0], ids[1], ids[2], ids[0]]
    assert socket.closed == []


async def test_too_far_behind_closes_with_1013_once() -> None:
    tenant, socket = uuid.uuid4(), Socket()
    subscriber = Subscriber(tenant, max_pending=2)
    subscriber.attach(socket.send, socket.closed.append)
    socket.writable.clear()
    assert subscriber.offer(delivery(tenant))  # in flight
    assert subscriber.offer(delivery(tenant))
    assert subscriber.offer(delivery(tenant))
    assert not subscriber.offer(delivery(tenant))  # the third pending one is one too many
    assert [c.code for c in socket.closed] == [CLOSE_TRY_AGAIN]
    assert not subscriber.offer(delivery(tenant))
    assert len(socket.closed) == 1


async def test_detach_stops_a_send_in_flight_without_closing() -> None:
    tenant, socket = uuid.uuid4(), Socket()
    subscriber = Subscriber(tenant)
    subscriber.attach(socket.send, socket.closed.append)
    socket.writable.clear()
    assert subscriber.offer(delivery(tenant))
    subscriber.detach()
    socket.writable.set()
    await asyncio.sleep(0)  # one turn: the cancelled send would have run here
    await asyncio.sleep(0)
    assert socket.sent == []
    assert socket.closed == []
    assert not subscriber.offer(delivery(tenant))
