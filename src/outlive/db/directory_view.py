"""A process's view of the directory (`outlive.db.directory`): tenant → cell, in memory.

Loaded whole at start, then only the rows changed since the last version seen: at once when the
directory announces a change (LISTEN: a trigger NOTIFYs every change of a placement), and once
a second besides (the acknowledgement's period, below); while that announcement cannot be
heard, every `OUTLIVE_DIRECTORY_POLL_S` (0.2 s) as before. Polling every 0.2 s was five
statements a second per API process for changes that come a few times a day.

The staleness is bounded: a view that has not read the directory for
`OUTLIVE_DIRECTORY_STALE_S` (5 s) answers nothing (`ServiceUnavailable`, HTTP 503) instead of a
cell that may be wrong, so a tenant's writes never reach a cell it left, whatever happened to
this process or to the directory. A poll that applied a change then acknowledges the version
(the `viewers` table), after `drain` (the requests this process had in flight for a tenant that
is now held) returned: a move copies the tail only once every live viewer acknowledged its hold,
so no write of the held tenant is still on its way to the old cell.

A poll that found nothing new acknowledges only every `ACKS_PER_STALE`-th of the staleness
bound (1 s), not on every poll: the acknowledgement is an upsert, and five a second were half
of an idle API process's statements (bench/cells.py). The view counts as fresh from its last
acknowledged read only, so the two bounds stay one: a view whose acknowledgement is older than
`OUTLIVE_DIRECTORY_STALE_S` refuses to route, and a move waits for no viewer silent that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from uuid import uuid4

import asyncpg

from outlive.config import DEFAULT_CELL
from outlive.db.directory import Directory, Placement
from outlive.errors import ServiceUnavailable
from outlive.ids import TenantId

log = logging.getLogger(__name__)

Drain = Callable[[set[TenantId]], Awaitable[None]]

ACKS_PER_STALE = 5  # an unchanged view acknowledges this many times per staleness bound
ACK_SLACK_S = 0.001  # a timer may fire a hair early: the read it wakes for must acknowledge


async def _nothing_to_drain(_: set[TenantId]) -> None:
    return None


def viewer_id() -> str:
    """This process's name in `viewers`: host, pid and a random part (a restarted pid is new)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"


class DirectoryView:
    def __init__(
        self,
        directory: Directory,
        *,
        poll_s: float,
        stale_s: float,
        drain: Drain = _nothing_to_drain,
        on_moved: Callable[[TenantId], object] = lambda _: None,
        viewer: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.poll_s = poll_s
        self.stale_s = stale_s
        self.drain = drain
        self.on_moved = on_moved  # a tenant's cell changed: its sockets reconnect to the new one
        self.viewer = viewer or viewer_id()
        self.clock = clock
        self.version = 0
        self.fresh_at = float("-inf")  # when the last acknowledged read started (monotonic)
        self._placements: dict[TenantId, Placement] = {}
        self._old_tokens: dict[bytes, TenantId] = {}  # a token made before tokens named tenants
        self._released: dict[TenantId, asyncio.Event] = {}
        self._changed = asyncio.Event()
        self._notified = asyncio.Event()  # the directory announced a change (LISTEN)
        self._listener: asyncpg.Connection | None = None

    async def poll(self) -> None:
        """Read what changed, apply it, drain what is newly held, acknowledge the version."""
        started = self.clock()
        changes = await self.directory.placements(self.version)
        if changes:
            await self._load_old_tokens([p.tenant_id for p in changes])
        held: set[TenantId] = set()
        for placement in changes:
            before = self._placements.get(placement.tenant_id)
            self._placements[placement.tenant_id] = placement
            self.version = max(self.version, placement.version)
            if placement.held and (before is None or not before.held):
                held.add(placement.tenant_id)
            if not placement.held and (event := self._released.pop(placement.tenant_id, None)):
                event.set()
            if before is not None and before.cell != placement.cell:
                self.on_moved(placement.tenant_id)
        if held:
            await self.drain(held)  # their requests in flight finish on the old cell first
        if changes or started - self.fresh_at >= self.stale_s / ACKS_PER_STALE:
            await self.directory.ack(self.viewer, self.version)
            self.fresh_at = started  # fresh from an acknowledged read only (see above)
        if changes:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _load_old_tokens(self, tenants: list[TenantId]) -> None:
        """The old tokens of the changed tenants (all of them at the first read)."""
        first = self.version == 0
        loaded = await self.directory.old_tokens(None if first else tenants)
        if not first:
            changed = set(tenants)
            self._old_tokens = {h: t for h, t in self._old_tokens.items() if t not in changed}
        self._old_tokens.update(loaded)

    def old_token(self, token_hash: bytes) -> TenantId | None:
        """The tenant of a token made before tokens named their tenant, once a move listed it
        (None: a token of the default cell, or no token at all)."""
        return self._old_tokens.get(token_hash)

    async def run(self) -> None:
        """Read on every change the directory announces, else every `stale_s / ACKS_PER_STALE`
        (the acknowledgement's own period); without that announcement (the LISTEN connection
        is down) every `poll_s`. Until cancelled (a `Daemon`'s body); a failed read leaves the
        view to age."""
        try:
            while True:
                self._notified.clear()  # a change announced during the read: read again at once
                read = False
                try:
                    await self.poll()
                    read = True
                except Exception as exc:  # noqa: BLE001 (the view ages; past stale_s it refuses)
                    log.warning("the directory could not be read: %r", exc)
                wait_s = self.poll_s  # after a failed read too: tried again every poll_s
                if read and await self._listening():  # until the next acknowledgement is due
                    ack_at = self.fresh_at + self.stale_s / ACKS_PER_STALE
                    wait_s = max(0.0, ack_at - self.clock()) + ACK_SLACK_S
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._notified.wait()
        finally:
            if self._listener is not None:
                with contextlib.suppress(Exception):
                    await self._listener.close(timeout=2)

    async def _listening(self) -> bool:
        """The directory's announcements are heard (the connection opened again if lost)."""
        if self.listening:
            return True
        try:
            self._listener = await self.directory.listen(self._notified.set)
        except Exception as exc:  # noqa: BLE001 (unreachable: read every poll_s meanwhile)
            log.debug("the directory's changes cannot be listened for (%r)", exc)
            self._listener = None
            return False
        self._notified.set()  # what changed while nobody listened: read it now
        return True

    @property
    def listening(self) -> bool:
        """The directory's announcements of its changes are heard."""
        return self._listener is not None and not self._listener.is_closed()

    def fresh(self) -> bool:
        return self.clock() - self.fresh_at <= self.stale_s

    def placement(self, tenant_id: TenantId) -> Placement | None:
        if not self.fresh():
            raise ServiceUnavailable("the directory of cells cannot be read; retry", retry_after=1)
        return self._placements.get(tenant_id)

    def cell_of(self, tenant_id: TenantId | None) -> str:
        """The tenant's cell: its row's, or the default cell's (no row, no tenant)."""
        if tenant_id is None:
            return DEFAULT_CELL
        placement = self.placement(tenant_id)
        return DEFAULT_CELL if placement is None else placement.cell

    def held(self, tenant_id: TenantId) -> bool:
        placement = self.placement(tenant_id)
        return placement is not None and placement.held

    async def released(self, tenant_id: TenantId, timeout_s: float) -> bool:
        """Wait until the tenant is no longer held (True), or `timeout_s` (False)."""
        if not self.held(tenant_id):
            return True
        event = self._released.setdefault(tenant_id, asyncio.Event())
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def slugs(self) -> dict[TenantId, Placement]:
        return dict(self._placements)
