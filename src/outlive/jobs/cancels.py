"""Cancel requests pushed to the attempts a worker executes (`outlive.workflows.deps.CancelWatch`).

`cancelRun` on a RUNNING run sets `cancel_requested_at`; a trigger NOTIFYs `outlive_cancel` with
the run's id when that commits (migration 0017). Each worker keeps one LISTEN connection and hands
the notification to the attempt of that run, if it executes one: the step the attempt awaits is
interrupted within a second of the commit (`outlive.workflows.calls.Interrupts`). The connection
is (re)opened every `RECONNECT_S` while it is down; meanwhile, and behind PgBouncer in transaction
mode (where LISTEN cannot work), the attempt's heartbeat finds the request instead (within a third
of `OUTLIVE_RUN_HEARTBEAT_S`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

import asyncpg

from outlive.db import primary
from outlive.ids import RunId
from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

CHANNEL = "outlive_cancel"
RECONNECT_S = 5.0


class CancelListener:
    """One LISTEN connection per worker process; `watch` is what an attempt registers."""

    def __init__(self, listen_url: str | None) -> None:
        self._listen_url = listen_url
        self._watchers: dict[RunId, list[Callable[[], None]]] = {}
        self._connection: asyncpg.Connection | None = None
        self._daemon = Daemon("outlive-cancels", self._keep)
        self.listening = asyncio.Event()

    def watch(self, run_id: RunId, requested: Callable[[], None]) -> Callable[[], None]:
        self._watchers.setdefault(run_id, []).append(requested)

        def unwatch() -> None:
            found = self._watchers.get(run_id)
            if found is not None and requested in found:
                found.remove(requested)
                if not found:
                    del self._watchers[run_id]

        return unwatch

    async def start(self) -> None:
        if self._listen_url is None:
            return
        await self._connect()
        self._daemon.start()

    async def stop(self) -> None:
        await self._daemon.stop()
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(RECONNECT_S)
            if self._connection is None or self._connection.is_closed():
                self.listening.clear()
                await self._connect()

    async def _connect(self) -> None:
        assert self._listen_url is not None  # noqa: S101 (start() returned without one)
        try:
            self._connection = await primary.connect(
                self._listen_url, server_settings={"application_name": "outlive-cancels"}
            )
            await self._connection.add_listener(CHANNEL, self._notified)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("cancels: cannot LISTEN (%r); heartbeats find cancel requests", exc)
            self._connection = None
            return
        self.listening.set()

    def _notified(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            run_id = RunId(UUID(payload))
        except ValueError:
            return
        for requested in list(self._watchers.get(run_id, ())):
            requested()
