"""`Coalesced`: calls of one coroutine per key, at most one in flight in this process and at
most one more waiting, shared by every caller that came while one ran.

Admission's dispatch function locks the tenant's row (`outlive.services.admission`). Every
settle calls it after its commit, so a tenant that floods had a dispatch per settle queued on
that row lock, each holding a pooled connection while it waited: with a worker's pool full of
them, another tenant's claim waited for a connection (the noisy-neighbour tail of issue 26). A
dispatch that starts after a caller's commit sees what that commit freed, so one dispatch that
starts after the one in flight ends answers every caller that came meanwhile: its result is
theirs, as if each had run its own behind the lock, and at most one connection per tenant and
process waits for the row.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class Coalesced(Generic[K, T]):
    """`await coalesced(key)`: `work(key)` run now when none is in flight for `key`; else the
    result of the one run next, which starts once the one in flight ended (a caller never gets
    the result of a run that started before it asked)."""

    def __init__(self, work: Callable[[K], Awaitable[T]]) -> None:
        self._work = work
        self._busy: set[K] = set()
        self._next: dict[K, asyncio.Future[T]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # the follow-ups in flight (kept alive)

    async def __call__(self, key: K) -> T:
        if key not in self._busy:
            self._busy.add(key)
            try:
                return await self._work(key)
            finally:
                self._ended(key)
        follow = self._next.get(key)
        if follow is None:
            follow = self._next[key] = asyncio.get_running_loop().create_future()
            follow.add_done_callback(retrieved)
        return await asyncio.shield(follow)

    def _ended(self, key: K) -> None:
        follow = self._next.pop(key, None)
        if follow is None:
            self._busy.discard(key)
            return
        # `key` stays busy. The follow-up is done for every caller that waits for it, so it
        # runs in a context of its own: not in the one that ended (its request's read scope,
        # byte budget and log bindings are that caller's alone).
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._follow_up(key, follow), context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow_up(self, key: K, follow: asyncio.Future[T]) -> None:
        try:
            result = await self._work(key)
        except asyncio.CancelledError:
            follow.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 (every caller that waited gets it)
            follow.set_exception(exc)
        else:
            follow.set_result(result)
        finally:
            self._ended(key)


def retrieved(future: asyncio.Future[Any]) -> None:
    """Its callers may all have been cancelled meanwhile: an error nobody awaited is not logged
    as never retrieved (each caller that awaited it got it)."""
    if not future.cancelled():
        future.exception()
