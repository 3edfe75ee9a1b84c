"""A stopping worker gives a running job its grace to finish, and does not wait on idle work."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from saq.job import Status

from outlive.jobs.envelopes import ENVELOPES, Payload
from outlive.jobs.handlers import Handler

GRACE_S = 120.0  # saq used to wait all of it for an idle dequeue; the test would time out


class Slow(Payload):
    n: int


class Gate:
    def __init__(self) -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.finished: list[int] = []

    async def handle(self, deps: Any, payload: Slow) -> None:
        self.entered.set()
        await self.release.wait()
        self.finished.append(payload.n)

    async def give_up(self, deps: Any, payload: Any, error: str) -> None:
        raise AssertionError(f"gave up: {error}")


async def test_a_running_job_finishes_and_the_idle_rest_does_not_hold_the_stop(
    jobs_world: Any,
) -> None:
    gate = Gate()
    async with jobs_world(
        {"test.slow.v1": (Slow, Handler(gate.handle, gate.give_up))}, shutdown_grace_s=GRACE_S
    ) as world:
        types = ENVELOPES.with_type("test.slow.v1", Slow)
        envelope = types.build("test.slow.v1", {"n": 7})
        await world.producer(types).send([envelope])
        await gate.entered.wait()

        began = time.monotonic()
        stopping = asyncio.create_task(world.host.stop())
        await asyncio.sleep(0)  # the stop has begun; the job is still inside its handler
        assert not stopping.done()
        gate.release.set()
        await stopping
        took = time.monotonic() - began

        job = await world.queue.job(str(envelope.id))
        assert job is not None
    assert gate.finished == [7]  # not cancelled: it had its grace
    assert job.status == Status.COMPLETE
    assert took < GRACE_S / 4, f"the stop took {took:.1f}s"
