"""`outlive directory init`, `outlive cell add|list`, `outlive tenant list|move` (docs/cells.md).

The directory is `OUTLIVE_DIRECTORY_URL`; the default cell is DATABASE_URL. `tenant list` is the
one read across cells, and says so: it reads every cell in turn (an operator's view, never a
request's), and a cell that cannot be read is named, not skipped in silence.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from outlive.cli.common import CliError, load_settings, run
from outlive.config import DEFAULT_CELL, Settings
from outlive.db import primary
from outlive.db.directory import Cell, Directory, Placement
from outlive.ids import SLOTS, TenantId


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[Directory]:
    if settings.directory_url is None:
        raise CliError("OUTLIVE_DIRECTORY_URL is not set: this deployment has one cell", 2)
    directory = await Directory.open(settings.directory_url)
    try:
        yield directory
    finally:
        await directory.close()


async def init_directory(settings: Settings) -> str:
    if not settings.database_url:
        raise CliError("DATABASE_URL (the default cell) is not set", 2)
    async with opened(settings) as directory:
        await directory.ensure_schema(settings.database_url)
        cells = await directory.cells()
    return f"directory ready: {len(cells)} cell(s), {SLOTS} slots"


async def add_cell(settings: Settings, name: str, url: str, slots: range | None) -> str:
    conn = await primary.connect(url)  # reachable, and migrated (`outlive migrate` there first)
    try:
        if not await conn.fetchval("SELECT to_regclass('runs') IS NOT NULL"):
            raise CliError(f"{name}: run `outlive migrate` with DATABASE_URL={url} first", 2)
    finally:
        await conn.close()
    async with opened(settings) as directory:
        await directory.add_cell(name, url, list(slots or ()))
    given = f", slots {slots.start}-{slots.stop - 1}" if slots else ""
    return f"cell {name} added{given}: restart the API processes, start its workers"


async def list_cells(settings: Settings) -> list[str]:
    async with opened(settings) as directory:
        cells = await directory.cells()
        rows = await directory.pool.fetch(
            "SELECT s.cell, count(DISTINCT s.slot) AS slots, count(t.tenant_id) AS tenants"
            " FROM slots s LEFT JOIN tenants t USING (slot) GROUP BY s.cell"
        )
    counts = {r["cell"]: (r["slots"], r["tenants"]) for r in rows}
    return [
        f"{c.name}\t{counts.get(c.name, (0, 0))[0]} slots\t"
        f"{counts.get(c.name, (0, 0))[1]} placed tenants"
        for c in cells
    ]


_TENANTS = (
    "SELECT t.id, t.slug, (SELECT count(*) FROM runs r WHERE r.tenant_id = t.id"
    " AND r.status IN ('QUEUED', 'RUNNING', 'WAITING')) AS active FROM tenants t ORDER BY t.slug"
)


async def list_tenants(settings: Settings) -> list[str]:
    """Every tenant of every cell (a fan-out, one cell after the other), with its cell as the
    directory says and its active runs; without a directory, DATABASE_URL's (the one cell)."""
    if settings.directory_url is None:
        if not settings.database_url:
            raise CliError("DATABASE_URL is not set", 2)
        return await _cell_tenants(Cell(DEFAULT_CELL, settings.database_url), {})
    lines = []
    async with opened(settings) as directory:
        placed = {p.tenant_id: p for p in await directory.placements()}
        for cell in await directory.cells():
            lines.extend(await _cell_tenants(cell, placed))
    return lines


async def _cell_tenants(cell: Cell, placed: dict[TenantId, Placement]) -> list[str]:
    try:
        conn = await primary.connect(cell.database_url)
    except Exception as exc:  # noqa: BLE001 (the cell is named, the others are listed)
        return [f"# cell {cell.name} cannot be read: {exc!r}"]
    try:
        rows = await conn.fetch(_TENANTS)
    finally:
        await conn.close()
    lines = []
    for row in rows:
        placement = placed.get(row["id"])
        if (placement.cell if placement else DEFAULT_CELL) != cell.name:
            continue  # a copy a move left (or is making): not this cell's tenant
        held = "\theld" if placement and placement.held else ""
        lines.append(f"{row['slug']}\t{cell.name}\t{row['active']} active{held}")
    return lines


def cmd_directory_init(args: argparse.Namespace) -> None:
    print(run(init_directory(load_settings())))  # noqa: T201


def cmd_cell_add(args: argparse.Namespace) -> None:
    print(run(add_cell(load_settings(), args.name, args.url, args.slots)))  # noqa: T201


def cmd_cell_list(args: argparse.Namespace) -> None:
    print("\n".join(run(list_cells(load_settings()))))  # noqa: T201


def cmd_tenant_list(args: argparse.Namespace) -> None:
    print("\n".join(run(list_tenants(load_settings()))))  # noqa: T201


def cmd_tenant_move(args: argparse.Namespace) -> None:
    from outlive.moves import MoveFailed, move_tenant

    try:
        report = run(
            move_tenant(
                load_settings(),
                args.slug,
                args.to,
                dry_run=args.dry_run,
                say=lambda line: print(line, flush=True),  # noqa: T201
            )
        )
    except MoveFailed as exc:
        raise CliError(str(exc), 1) from None
    print("\n".join(report.lines))  # noqa: T201
