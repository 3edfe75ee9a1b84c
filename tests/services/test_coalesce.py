"""`Coalesced`: one call in flight per key, one more for everyone who asked meanwhile, and never
a result of a call that started before the caller asked."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from outlive.services.coalesce import Coalesced


class Gated:
    """A `work` that records each call and ends only when the test lets it."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.entered = asyncio.Event()
        self.gates: list[asyncio.Event] = []
        self.fail_next = False

    async def __call__(self, key: str) -> int:
        self.started.append(key)
        number = len(self.started)  # the call's own number, what its callers get
        gate = asyncio.Event()
        self.gates.append(gate)
        self.entered.set()
        await gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError(f"call {number} failed")
        return number

    async def next_entered(self) -> None:
        await self.entered.wait()
        self.entered.clear()


async def one_in_flight() -> tuple[Gated, Coalesced[str, int], asyncio.Task[int]]:
    """A `Coalesced` over a `Gated` work, with a first call for "t" in flight."""
    work = Gated()
    coalesced = Coalesced(work)
    first = asyncio.create_task(coalesced("t"))
    await work.next_entered()
    return work, coalesced, first


async def test_callers_during_a_call_share_one_call_that_starts_after_it() -> None:
    work, coalesced, first = await one_in_flight()
    later = [asyncio.create_task(coalesced("t")) for _ in range(10)]
    other = asyncio.create_task(coalesced("u"))  # another key is not held back
    await work.next_entered()
    assert work.started == ["t", "u"]
    work.gates[1].set()
    assert await other == 2
    work.gates[0].set()
    assert await first == 1
    await work.next_entered()  # the follow-up, for the ten
    assert work.started == ["t", "u", "t"]
    work.gates[2].set()
    assert await asyncio.gather(*later) == [3] * 10
    assert await _now(coalesced, work) == 4  # nothing in flight: a call of its own


async def test_a_caller_during_the_follow_up_waits_for_one_more() -> None:
    work, coalesced, first = await one_in_flight()
    second = asyncio.create_task(coalesced("t"))
    await asyncio.sleep(0)  # `second` asks while the first runs
    work.gates[0].set()
    await work.next_entered()  # the follow-up started: `third` asks after it started
    third = asyncio.create_task(coalesced("t"))
    work.gates[1].set()
    assert await first == 1
    assert await second == 2
    await work.next_entered()
    work.gates[2].set()
    assert await third == 3


async def test_a_failed_follow_up_reaches_each_caller_and_the_next_call_runs_anew() -> None:
    work, coalesced, first = await one_in_flight()
    waiting = [asyncio.create_task(coalesced("t")) for _ in range(3)]
    await asyncio.sleep(0)
    work.gates[0].set()
    assert await first == 1
    await work.next_entered()
    work.fail_next = True
    work.gates[1].set()
    for task in waiting:
        with pytest.raises(RuntimeError, match="call 2 failed"):
            await task
    assert await _now(coalesced, work) == 3


async def test_a_cancelled_caller_leaves_the_follow_up_to_the_others() -> None:
    work, coalesced, first = await one_in_flight()
    quitter, stayer = (asyncio.create_task(coalesced("t")) for _ in range(2))
    await asyncio.sleep(0)
    quitter.cancel()
    work.gates[0].set()
    assert await first == 1
    await work.next_entered()
    work.gates[1].set()
    assert await stayer == 2
    assert quitter.cancelled()


async def _now(coalesced: Coalesced[str, int], work: Gated) -> int:
    call = asyncio.create_task(coalesced("t"))
    await work.next_entered()
    work.gates[-1].set()
    return await call


async def test_the_follow_up_runs_in_no_caller_s_context() -> None:
    """It is done for all its callers: a value the call it follows set (a request's read scope,
    its log bindings) is not seen by it."""
    scope: contextvars.ContextVar[str] = contextvars.ContextVar("scope", default="none")
    seen: list[str] = []
    release = asyncio.Event()

    async def work(key: str) -> str:
        seen.append(scope.get())
        await release.wait()
        return key

    coalesced = Coalesced(work)

    async def in_request(name: str) -> str:
        scope.set(name)
        return await coalesced("t")

    first = asyncio.create_task(in_request("request-1"))
    await asyncio.sleep(0)
    second = asyncio.create_task(in_request("request-2"))
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(first, second) == ["t", "t"]
    assert seen == ["request-1", "none"]
