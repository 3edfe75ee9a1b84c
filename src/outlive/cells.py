"""Cells in a process (docs/cells.md): an API process serves every cell, a worker those of
`OUTLIVE_CELLS`.

Without `OUTLIVE_DIRECTORY_URL` there is one cell, `DATABASE_URL`, and nothing here runs. With
it, `Cells` is what an API process routes by: a bearer token names its tenant
(`services.tenants.token_tenant`), the process's `DirectoryView` names the tenant's cell, and the
request runs on that cell's `Services` (its engine, raw pool, queues and admission), never
another's: no statement of a request reaches a cell that is not its tenant's. The `default` cell
is the process's own runtime (DATABASE_URL); each other cell is an `api-cell` runtime, with its
pools sized as the default's (the connection budget is per cell: docs/operating.md).

While a move holds a tenant (`held`), its requests wait for the release (`admitted`), then go to
the tenant's new cell; the requests in flight when the hold arrived are drained before the view
acknowledges it (`drain`), so the move copies the tail only once they committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator, Collection
from contextlib import AsyncExitStack, asynccontextmanager

from outlive.config import DEFAULT_CELL, Settings
from outlive.db.directory import Cell, Directory
from outlive.db.directory_view import DirectoryView
from outlive.errors import ServiceUnavailable
from outlive.ids import TenantId, TokenId
from outlive.resolvers.context import Services
from outlive.runtime import Runtime, open_runtime
from outlive.services import invitations, tokens
from outlive.services.tenants import hash_token, token_tenant
from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

HOLD_WAIT_S = 10.0  # a held tenant's request waits this long for the move's release, then 503
DRAIN_S = 30.0  # how long a hold waits for this process's requests of the tenant in flight


def cell_settings(settings: Settings, cell: Cell) -> Settings:
    """The settings of one cell: its database, its name (its queues' and keys' names)."""
    update: dict[str, object] = {"database_url": cell.database_url, "cell": cell.name}
    if cell.name != DEFAULT_CELL:  # OUTLIVE_DB_LIVENESS_URL names the default cell's server
        update["db_liveness_url"] = None
    return settings.model_copy(update=update)


async def served_cells(directory: Directory, names: Collection[str]) -> list[Cell]:
    """The cells a worker serves: those named (all of them when none is), each known."""
    cells = await directory.cells()
    if not names:
        return cells
    known = {c.name: c for c in cells}
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise LookupError(f"no cell {', '.join(unknown)} in the directory")
    return [known[n] for n in names]


class Cells:
    """An API process's cells: each one's `Services`, and the view that routes to them."""

    view: DirectoryView  # set by `open_cells` (it drains through this object)

    def __init__(self, services: dict[str, Services]) -> None:
        self.services = services
        self._in_flight: Counter[TenantId] = Counter()
        self._idle: dict[TenantId, asyncio.Event] = {}

    def for_tenant(self, tenant_id: TenantId | None) -> Services:
        """The services of the tenant's cell (`ServiceUnavailable` when the view is stale or
        the cell is not one this process knows yet)."""
        cell = self.view.cell_of(tenant_id)
        services = self.services.get(cell)
        if services is None:
            raise ServiceUnavailable(f"cell {cell!r} is not served here yet; retry")
        return services

    def tenant_of(self, token: str) -> TenantId | None:
        """The token's tenant: the one it names, or for a token made before tokens named their
        tenant, the one a move listed it for (`old_tokens`); None: the default cell's."""
        named = token_tenant(token)
        return named if named is not None or not token else self.view.old_token(hash_token(token))

    def for_token(self, token: str) -> Services:
        return self.for_tenant(self.tenant_of(token))

    async def for_code(self, code: str) -> Services:
        """The cell of an invitation code: the tenant's it names; a code sent before codes named
        their tenant is asked of every cell in turn (only `acceptInvitation` and
        `invitationCode` do, rate limited per client, and such codes expire)."""
        tenant_id = token_tenant(code)
        if tenant_id is not None:
            await self.admitted(tenant_id)
            return self.for_tenant(tenant_id)
        for services in self.services.values():
            refusal = (await invitations.check_code(services.sessions, code)).refusal
            if refusal is None or refusal.reason != "unknown":
                return services
        return self.services[DEFAULT_CELL]

    async def admitted(self, tenant_id: TenantId) -> None:
        """Return once the tenant is not held by a move (503 past `HOLD_WAIT_S`)."""
        if self.view.held(tenant_id) and not await self.view.released(tenant_id, HOLD_WAIT_S):
            raise ServiceUnavailable("this tenant is being moved; retry", retry_after=1)

    @asynccontextmanager
    async def in_flight(self, tenant_id: TenantId) -> AsyncIterator[None]:
        """Count one request of the tenant while it runs (`drain` waits for them)."""
        self._in_flight[tenant_id] += 1
        try:
            yield
        finally:
            self._in_flight[tenant_id] -= 1
            if self._in_flight[tenant_id] <= 0:
                del self._in_flight[tenant_id]
                if (idle := self._idle.pop(tenant_id, None)) is not None:
                    idle.set()

    async def drain(self, tenants: set[TenantId]) -> None:
        """Wait until no request of `tenants` is in flight here (at most `DRAIN_S`)."""
        waits = []
        for tenant_id in tenants:
            if self._in_flight.get(tenant_id):
                waits.append(self._idle.setdefault(tenant_id, asyncio.Event()).wait())
        if waits:
            async with asyncio.timeout(DRAIN_S):
                await asyncio.gather(*waits)

    async def still_valid(self, token_ids: Collection[TokenId]) -> set[TokenId]:
        """The open sockets' re-check, on every cell (off the request path: a background
        fan-out; a token's id is unique across cells). A cell that cannot be read keeps its
        sockets until the next check."""
        valid: set[TokenId] = set()
        for name, services in self.services.items():
            try:
                valid |= await tokens.still_valid(services.sessions, token_ids)
            except ServiceUnavailable:
                log.warning("cell %s: its sockets' tokens are checked again later", name)
                valid |= set(token_ids)
        return valid


async def open_cells(
    stack: AsyncExitStack, settings: Settings, runtime: Runtime, base: Services
) -> Cells | None:
    """The API's cells, opened on `stack` (None without a directory: one cell, as before)."""
    if settings.directory_url is None:
        return None
    directory = await Directory.open(settings.directory_url)
    stack.push_async_callback(directory.close)
    services: dict[str, Services] = {DEFAULT_CELL: base}
    sockets = runtime.require_realtime().sockets
    for cell in await directory.cells():
        if cell.name == DEFAULT_CELL:
            continue
        cell_runtime = await stack.enter_async_context(
            open_runtime(cell_settings(settings, cell), "api-cell")
        )
        services[cell.name] = cell_services(base, cell_runtime)
    cells = Cells(services)
    base.code_cell = cells.for_code  # `acceptInvitation` (no token) finds its cell
    cells.view = DirectoryView(
        directory,
        poll_s=settings.directory_poll_s,
        stale_s=settings.directory_stale_s,
        drain=cells.drain,
        on_moved=lambda tenant_id: sockets.close_tenant(tenant_id, "moved to another cell"),
    )
    await cells.view.poll()  # the whole directory, before the first request
    stack.push_async_callback(directory.forget, cells.view.viewer)
    Daemon("outlive-directory", cells.view.run).start_on(stack)
    return cells


def cell_services(base: Services, runtime: Runtime) -> Services:
    """The process's services with one cell's database, queues and admission."""
    queues = runtime.require_queues()
    return dataclasses.replace(
        base,
        sessions=runtime.sessions,
        admission=runtime.sessions.admission,
        jobs=runtime.sessions.jobs,
        instances=queues.instances,
    )
