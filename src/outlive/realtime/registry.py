"""The registry of one API process's authenticated sockets.

A socket is registered when its `connection_init` is accepted and leaves when it ends. The
registry enforces the per-tenant cap (`OUTLIVE_WS_MAX_PER_TENANT`, counted per process) and
closes sockets whose token stopped working, with 4403:

- at once, when a revocation is announced (`close_token`, from the hub's control channel);
- at the instant the token expires (a timer per socket whose token has an `expires_at`);
- at the latest `OUTLIVE_WS_RECHECK_S` later, by a periodic check of every open socket's token
  in one query (a token deleted or revoked while Redis was unreachable, say); the query is the
  composition root's to give (`start(still_valid)`): this layer reads no database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import UUID

from outlive.ids import TokenId
from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

CLOSE_FORBIDDEN = 4403
MAX_CLOSE_REASON_BYTES = 123  # a close frame is a control frame: 125 bytes, 2 of them the code

Closer = Callable[[int, str], Awaitable[None]]
CLOSE_RESTART = 1012  # "service restart": the client reconnects (and refetches)
StillValid = Callable[[list[TokenId]], Awaitable[Collection[TokenId]]]


class _Tenant(Protocol):
    @property
    def id(self) -> UUID: ...


class SocketPrincipal(Protocol):
    """What the registry needs of a principal (`services.tenants.Principal`)."""

    @property
    def tenant(self) -> _Tenant: ...
    @property
    def token_id(self) -> TokenId | None: ...
    @property
    def expires_at(self) -> datetime | None: ...


class TooManySockets(Exception):
    """This tenant already has its cap of open sockets in this process."""


class OpenSocket:
    __slots__ = ("_timer", "closer", "principal")

    def __init__(self, principal: SocketPrincipal, closer: Closer) -> None:
        self.principal = principal
        self.closer = closer
        self._timer: asyncio.TimerHandle | None = None

    @property
    def token_id(self) -> TokenId | None:
        return self.principal.token_id

    @property
    def token_ids(self) -> tuple[TokenId, ...]:
        """Its token, and the token that made it (a run read token dies with its parent)."""
        parent: TokenId | None = getattr(self.principal, "parent_token_id", None)
        return tuple(t for t in (self.principal.token_id, parent) if t is not None)


class SocketRegistry:
    def __init__(self, *, max_per_tenant: int, recheck_s: float) -> None:
        self.max_per_tenant = max_per_tenant
        self.recheck_s = recheck_s
        self._by_tenant: dict[UUID, set[OpenSocket]] = {}
        self._by_token: dict[UUID, set[OpenSocket]] = {}
        self._closing: set[asyncio.Task[Any]] = set()
        self._daemon = Daemon("outlive-socket-recheck", self._run)
        self._still_valid: StillValid | None = None

    def count(self, tenant_id: UUID) -> int:
        return len(self._by_tenant.get(tenant_id, ()))

    def add(self, principal: SocketPrincipal, closer: Closer) -> OpenSocket:
        """Register an accepted socket; `TooManySockets` when its tenant is at the cap."""
        tenant = self._by_tenant.setdefault(principal.tenant.id, set())
        if len(tenant) >= self.max_per_tenant:
            if not tenant:
                del self._by_tenant[principal.tenant.id]
            raise TooManySockets(f"at most {self.max_per_tenant} sockets per tenant")
        sock = OpenSocket(principal, closer)
        tenant.add(sock)
        for token_id in sock.token_ids:
            self._by_token.setdefault(token_id, set()).add(sock)
        if principal.expires_at is not None:
            loop = asyncio.get_running_loop()
            delay = (principal.expires_at - datetime.now(UTC)).total_seconds()
            sock._timer = loop.call_later(max(delay, 0), self.close, sock, "token expired")
        return sock

    def remove(self, sock: OpenSocket) -> None:
        """Idempotent."""
        if sock._timer is not None:
            sock._timer.cancel()
            sock._timer = None
        _discard(self._by_tenant, sock.principal.tenant.id, sock)
        for token_id in sock.token_ids:
            _discard(self._by_token, token_id, sock)

    def close(self, sock: OpenSocket, reason: str) -> None:
        """Unregister now and close with 4403 (in the background: this may run in a callback)."""
        self.remove(sock)
        self._background(_close(sock, reason))

    def _background(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def recheck_soon(self) -> None:
        """Re-check every open socket now, in the background (announcements may have been lost
        while the control channel was down)."""
        if self._still_valid is not None:
            self._background(self._recheck_logged(self._still_valid))

    def check_with(self, still_valid: StillValid) -> None:
        """Re-check with `still_valid` from now on (an API with cells: every cell's tokens)."""
        self._still_valid = still_valid

    def close_tenant(self, tenant_id: UUID, reason: str) -> int:
        """Close every socket of a tenant (moved to another cell: its clients reconnect and
        refetch there); how many."""
        socks = list(self._by_tenant.get(tenant_id, ()))
        for sock in socks:
            self.remove(sock)
            self._background(_close(sock, reason, CLOSE_RESTART))
        return len(socks)

    def close_token(self, token_id: UUID) -> int:
        """Close every socket of a revoked token; how many."""
        socks = list(self._by_token.get(token_id, ()))
        for sock in socks:
            self.close(sock, "token revoked")
        return len(socks)

    async def recheck(self, still_valid: StillValid) -> int:
        """Close the sockets whose token no longer works (one query); how many."""
        token_ids = [TokenId(t) for t in self._by_token]
        if not token_ids:
            return 0
        valid = await still_valid(token_ids)
        closed = 0
        for token_id in token_ids:
            if token_id not in valid:
                closed += self.close_token(token_id)
        return closed

    # --- the periodic re-check ---------------------------------------------------------------

    def start(self, still_valid: StillValid) -> None:
        """Re-check every `recheck_s`; `still_valid(token_ids)` is those that still work."""
        self._still_valid = still_valid
        self._daemon.start()

    async def stop(self) -> None:
        await self._daemon.stop()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _run(self) -> None:
        still_valid = self._still_valid
        assert still_valid is not None  # noqa: S101 (started with it)
        while True:
            await asyncio.sleep(self.recheck_s)
            await self._recheck_logged(still_valid)

    async def _recheck_logged(self, still_valid: StillValid) -> None:
        try:
            closed = await self.recheck(still_valid)
        except Exception:
            log.exception("socket re-check failed; trying again in %.0fs", self.recheck_s)
        else:
            if closed:
                log.info("closed %d socket(s) whose token stopped working", closed)


def _discard(index: dict[UUID, set[OpenSocket]], key: UUID, sock: OpenSocket) -> None:
    group = index.get(key)
    if group is not None:
        group.discard(sock)
        if not group:
            del index[key]


def close_reason(reason: str) -> str:
    """`reason` cut to what a close frame carries (`MAX_CLOSE_REASON_BYTES` of UTF-8, whole
    characters): every close of a socket goes through here, whoever wrote the reason (an id a
    client chose may be in it)."""
    encoded = reason.encode("utf-8", "replace")
    if len(encoded) <= MAX_CLOSE_REASON_BYTES:
        return reason
    return encoded[: MAX_CLOSE_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


async def _close(sock: OpenSocket, reason: str, code: int = 0) -> None:
    with suppress(Exception):  # already closed or gone: nothing to do
        await sock.closer(code or CLOSE_FORBIDDEN, close_reason(reason))
