"""Sockets that have not signed in yet (no acknowledged `connection_init`).

The app (`outlive.app`) counts them apart from the socket cap: past
`OUTLIVE_WS_MAX_UNAUTHENTICATED` of them, the oldest is closed with 4408 (as for an init that
timed out) to make room for the newcomer. A real client signs in within milliseconds of
connecting, so sockets that never sign in cannot hold every slot of `OUTLIVE_WS_MAX_SOCKETS`
for the whole init timeout (security review round 4, I3).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import cast

from starlette.types import Message, Receive, Send

CLOSE_INIT_TIMEOUT = 4408  # graphql-transport-ws: no connection_init in time


class Unauthenticated:
    """A socket's receive and send while it has not signed in: `evict` makes its next (or
    current) receive close it with 4408 and hand the app a disconnect.

    Signed in, `receive` hands back the server's own receive (a plain function returning its
    awaitable, no coroutine of its own): an idle socket waits in a receive for its whole life,
    and a frame of ours there was kept per socket (issue 47)."""

    __slots__ = ("_closed", "_evicted", "_receive", "_send", "signed_in")

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive, self._send = receive, send
        # A bare future, not an Event: an Event's waiter deque is ~760 bytes, and with 10,000
        # sockets every byte kept per socket counts (issue 47, tracemalloc). Dropped at sign-in.
        self._evicted: asyncio.Future[object] | None = asyncio.get_running_loop().create_future()
        self._closed = False
        self.signed_in = False  # from then on, receive and send go straight through

    def sign_in(self) -> None:
        self.signed_in, self._evicted = True, None

    def evict(self) -> None:
        if self._evicted is not None and not self._evicted.done():
            self._evicted.set_result(None)

    def receive(self) -> Awaitable[Message]:
        if self.signed_in or self._evicted is None:
            return self._receive()
        return self._receive_unless_evicted()

    async def _receive_unless_evicted(self) -> Message:
        assert self._evicted is not None  # noqa: S101 (checked by `receive`)
        if self._closed:
            return {"type": "websocket.disconnect", "code": CLOSE_INIT_TIMEOUT}
        getting: asyncio.Future[object] = asyncio.ensure_future(self._receive())
        await asyncio.wait({getting, self._evicted}, return_when=asyncio.FIRST_COMPLETED)
        if getting.done():
            return cast(Message, getting.result())
        getting.cancel()
        self._closed = True
        with contextlib.suppress(Exception):  # the client may be gone already
            await self._send({"type": "websocket.close", "code": CLOSE_INIT_TIMEOUT})
        return {"type": "websocket.disconnect", "code": CLOSE_INIT_TIMEOUT}

    async def send(self, message: Message) -> None:
        if not self._closed:  # after an eviction, the app's own close goes nowhere
            await self._send(message)
