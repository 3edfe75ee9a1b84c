"""Moving a tenant to another cell while it runs: `outlive tenant move SLUG --to CELL`.

The phases, each recorded in the directory's `moves` row before it starts, so that a move that
was interrupted resumes where it was (every phase can run again):

1. `copy`: the tenant's rows are copied to the target (`db.copy`), nothing held;
2. `hold`: the directory holds the tenant (its API requests wait, `outlive.cells`), and the
   tenant is paused on the source (`outlive tenant pause`: a running run parks at its next step
   boundary, the step in flight recorded; unless the operator had paused it already). The move
   waits until every live API process acknowledged the hold (its requests in flight finished)
   and no run of the tenant is RUNNING any more;
3. `tail`: the rows are copied again, the tail included, in one transaction of the target;
4. `flip`: the directory puts the tenant on the target and lets its requests go (they reach the
   target from then on: each API process's view changes within a poll);
5. `release`: the pause is lifted on the target; its runs are handed to the target's queue (the
   target's relay hands whatever else is due: Redis holds no truth);
6. `cleanup`: once every live API process acknowledged the flip, the source's rows are deleted.

The hold lasts from 2 to 4: an acknowledgement (a poll, `OUTLIVE_DIRECTORY_POLL_S`), the steps in
flight, and the tail's copy (docs/cells.md has figures). A move that cannot hold within
`HOLD_TIMEOUT_S` (a step that goes on) lets go, resumes the tenant on the source, and fails: run
it again later.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from outlive.cells import cell_settings
from outlive.config import Settings
from outlive.db import copy, primary
from outlive.db.directory import Cell, Directory, Placement
from outlive.db.ports import NO_INSTANCES
from outlive.ids import TenantId
from outlive.runtime import Role, Runtime, open_runtime
from outlive.services import pauses

HOLD_TIMEOUT_S = 30.0
PHASES = ("copy", "hold", "tail", "flip", "release", "cleanup")


class MoveFailed(RuntimeError):
    pass


@dataclass
class MoveReport:
    slug: str
    source: str
    target: str
    rows: dict[str, int] = field(default_factory=dict)
    hold_s: float = 0.0  # from the hold to the flip
    copy_s: float = 0.0  # the tail's copy
    settle_s: float = 0.0  # the hold's acknowledgements and the runs' parking
    lines: list[str] = field(default_factory=list)


@dataclass
class _Move:
    directory: Directory
    settings: Settings
    tenant_id: TenantId
    slug: str
    source: Cell
    target: Cell
    say: Callable[[str], None]
    stack: AsyncExitStack
    paused: bool = False  # this move paused the tenant (an operator's pause is kept)
    _runtimes: dict[str, Runtime] = field(default_factory=dict)

    async def runtime(self, cell: Cell) -> Runtime:
        if cell.name not in self._runtimes:
            role: Role = "cli-queues" if self.settings.redis_url else "cli"
            self._runtimes[cell.name] = await self.stack.enter_async_context(
                open_runtime(cell_settings(self.settings, cell), role)
            )
        return self._runtimes[cell.name]

    async def connect(self, cell: Cell) -> asyncpg.Connection:
        conn = await primary.connect(cell.database_url)
        self.stack.push_async_callback(conn.close)
        return conn

    async def phase(self, name: str) -> None:
        args = (self.tenant_id, self.slug, self.source.name, self.target.name)
        await self.directory.set_move(*args, name, self.paused)


async def tenant_placement(directory: Directory, settings: Settings, slug: str) -> Placement:
    """The tenant's row, made on the default cell for a tenant that has none yet."""
    placement = await directory.by_slug(slug)
    if placement is not None:
        return placement
    assert settings.database_url is not None  # noqa: S101 (the CLI required it)
    conn = await primary.connect(settings.database_url)
    try:
        tenant_id = await conn.fetchval("SELECT id FROM tenants WHERE slug = $1", slug)
    finally:
        await conn.close()
    if tenant_id is None:
        raise MoveFailed(f"no tenant {slug!r} in the directory or on the default cell")
    await directory.place(tenant_id, slug, "default")
    placement = await directory.by_slug(slug)
    assert placement is not None  # noqa: S101 (just placed)
    return placement


async def move_tenant(
    settings: Settings,
    slug: str,
    target: str,
    *,
    dry_run: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> MoveReport:
    """Move the tenant to cell `target` (see the module's docstring); resumes a move of it that
    was interrupted. `dry_run`: count its rows and time a read of them, change nothing."""
    if settings.directory_url is None:
        raise MoveFailed("OUTLIVE_DIRECTORY_URL is not set: there is one cell")
    directory = await Directory.open(settings.directory_url)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(directory.close)
        cells = {c.name: c for c in await directory.cells()}
        if target not in cells:
            raise MoveFailed(f"no cell {target!r} in the directory (cells: {', '.join(cells)})")
        placement = await tenant_placement(directory, settings, slug)
        pending = await directory.move(placement.tenant_id)
        source = cells[pending["source"] if pending else placement.cell]
        if pending is not None and pending["target"] != target:
            raise MoveFailed(f"{slug} is being moved to {pending['target']}: finish that first")
        move = _Move(
            directory, settings, placement.tenant_id, slug, source, cells[target], say, stack
        )
        move.paused = bool(pending and pending["paused"])
        report = MoveReport(slug, source.name, target)
        if dry_run:
            await _dry_run(move, report)
        elif source.name == target and pending is None:
            report.lines.append(f"{slug} is on {target} already")
        else:
            await _run(move, report, PHASES.index(pending["phase"]) if pending else 0)
        return report


async def _dry_run(move: _Move, report: MoveReport) -> None:
    conn = await move.connect(move.source)
    report.rows = await copy.count_rows(conn, move.tenant_id)
    started = time.perf_counter()
    await copy.read_rows(conn, move.tenant_id)  # the tail's read, as the move makes it
    read_s = time.perf_counter() - started
    # The hold: an acknowledgement (two polls at most), the tail's read and its write (~ the read).
    report.hold_s = 2 * move.settings.directory_poll_s + 2 * read_s
    for name, count in report.rows.items():
        if count:
            report.lines.append(f"{name}: {count}")
    report.lines.append(
        f"{sum(report.rows.values())} row(s) on {move.source.name}; expected hold"
        f" {report.hold_s:.2f} s (plus the steps in flight, which finish first)"
    )


async def _run(move: _Move, report: MoveReport, start: int) -> None:
    """The phases from `start` on (a resumed move starts again at its recorded phase; a move
    interrupted before its flip copies again from the start)."""
    if start < PHASES.index("flip"):
        start = 0
    source, target = await move.connect(move.source), await move.connect(move.target)
    held_at = time.perf_counter()
    if start == 0:
        await move.phase("copy")
        first = await copy.copy_rows(source, target, move.tenant_id)
        move.say(f"copied {first.total} row(s) in {first.seconds:.2f} s")
        for cell in (move.source, move.target):  # opened now: not inside the hold
            await move.runtime(cell)
        await move.phase("hold")
        held_at = time.perf_counter()
        await _hold(move, source)
        report.settle_s = time.perf_counter() - held_at
        await move.phase("tail")
        tail = await copy.copy_rows(source, target, move.tenant_id)
        report.rows, report.copy_s = tail.rows, tail.seconds
        await move.phase("flip")
    if start <= PHASES.index("flip"):
        await _keep_old_tokens(move, source)  # those made since the hold's list, too
        flipped = await move.directory.place(move.tenant_id, move.slug, move.target.name)
        report.hold_s = time.perf_counter() - held_at
        move.say(
            f"flipped to {move.target.name}; writes held {report.hold_s:.3f} s (acknowledged"
            f" and parked in {report.settle_s:.3f} s, tail copied in {report.copy_s:.3f} s)"
        )
        await move.phase("release")
    else:
        flipped = await move.directory.version()
    if start <= PHASES.index("release"):
        await _resume(move, move.target)
        await move.phase("cleanup")
    await _acknowledged(move, flipped)
    async with source.transaction():
        deleted = await copy.delete_rows(source, move.tenant_id)
    await move.directory.end_move(move.tenant_id)
    report.lines.append(
        f"{move.slug}: moved from {move.source.name} to {move.target.name};"
        f" {sum(report.rows.values())} row(s), writes held {report.hold_s:.3f} s,"
        f" {deleted} row(s) deleted on {move.source.name}"
    )


async def _hold(move: _Move, source: asyncpg.Connection) -> None:
    """Hold the tenant's requests and park its runs; on a timeout, let go and fail."""
    await _keep_old_tokens(move, source)  # its old tokens are held too, from this version on
    version = await move.directory.hold(move.tenant_id, held=True)
    paused_before = await source.fetchval(
        "SELECT paused_at IS NOT NULL FROM tenants WHERE id = $1", move.tenant_id
    )
    if not paused_before and not move.paused:
        runtime = await move.runtime(move.source)
        async with runtime.sessions.unit() as uow:
            await pauses.pause_tenant(uow, move.slug, paused=True, instances=NO_INSTANCES)
        move.paused = True
        await move.phase("hold")
    try:
        async with asyncio.timeout(HOLD_TIMEOUT_S):  # both at once: the API's and the runs'
            await asyncio.gather(_acknowledged(move, version), _parked(move, source))
    except TimeoutError:
        await _resume(move, move.source)
        await move.directory.hold(move.tenant_id, held=False)
        await move.directory.end_move(move.tenant_id)
        raise MoveFailed(
            f"{move.slug}: not held within {HOLD_TIMEOUT_S:g} s (a step or a process goes on);"
            " let go, nothing moved: try again"
        ) from None


async def _keep_old_tokens(move: _Move, source: asyncpg.Connection) -> None:
    """List the tenant's live tokens' hashes in the directory: a token made before tokens
    named their tenant is routed by this list once its tenant left the default cell."""
    hashes = await source.fetch(
        "SELECT token_hash FROM api_tokens WHERE tenant_id = $1 AND revoked_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > now())",
        move.tenant_id,
    )
    await move.directory.keep_old_tokens(move.tenant_id, [r["token_hash"] for r in hashes])


async def _parked(move: _Move, source: asyncpg.Connection) -> None:
    """Until no run of the tenant is RUNNING on the source (each parks at its next step)."""
    while await source.fetchval(  # noqa: ASYNC110 (runs park at their steps: no event)
        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'RUNNING'", move.tenant_id
    ):
        await asyncio.sleep(0.02)


async def _acknowledged(move: _Move, version: int) -> None:
    """Until every live API process applied directory version `version`."""
    live_s = move.settings.directory_stale_s
    while await move.directory.lagging(version, live_s):  # noqa: ASYNC110 (a table: no event)
        await asyncio.sleep(move.settings.directory_poll_s / 4)


async def _resume(move: _Move, cell: Cell) -> None:
    """Lift the move's pause on `cell`, handing the woken runs to its queue."""
    if not move.paused:
        return
    runtime = await move.runtime(cell)
    instances: Any = runtime.queues.instances if runtime.queues is not None else NO_INSTANCES
    async with runtime.sessions.unit() as uow:
        await pauses.pause_tenant(uow, move.slug, paused=False, instances=instances)
    move.paused = False
