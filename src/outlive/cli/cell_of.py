"""The cell a tenant-scoped CLI command acts on (docs/cells.md): every `outlive token` and
`outlive tenant` command that names a tenant resolves it here, through the directory.

Without `OUTLIVE_DIRECTORY_URL` every tenant is on DATABASE_URL, as before cells. With it, a
tenant the directory lists acts on its cell's database and queues; one it does not list is on
the default cell. A tenant a move holds is refused (exit 2, "retry"): a write to the cell it is
leaving could be lost with the move's tail. A command that names a token, not a tenant
(`token revoke ID`), or no tenant (`token list`), asks every cell: an operator's view.
"""

from __future__ import annotations

from outlive.cells import cell_settings
from outlive.cli.common import CliError
from outlive.config import DEFAULT_CELL, Settings
from outlive.db.directory import Directory


async def placed_cell(settings: Settings, slug: str) -> Settings | None:
    """The settings of the tenant's cell when the directory lists it on a cell other than the
    default; None otherwise (no directory, not listed, or on the default cell)."""
    if settings.directory_url is None:
        return None
    directory = await Directory.open(settings.directory_url)
    try:
        placement = await directory.by_slug(slug)
        cells = {c.name: c for c in await directory.cells()}
    finally:
        await directory.close()
    if placement is not None and placement.held:
        raise CliError(f"{slug} is being moved to another cell: retry once the move is done", 2)
    if placement is None or placement.cell == DEFAULT_CELL:
        return None
    return cell_settings(settings, cells[placement.cell])


async def tenant_cell(settings: Settings, slug: str) -> Settings:
    """The settings to act on tenant `slug` with: its cell's."""
    return await placed_cell(settings, slug) or settings


async def every_cell(settings: Settings) -> list[Settings]:
    """Every cell's settings, the default first (just `settings` without a directory)."""
    if settings.directory_url is None:
        return [settings]
    directory = await Directory.open(settings.directory_url)
    try:
        cells = await directory.cells()
    finally:
        await directory.close()
    others = [cell_settings(settings, c) for c in cells if c.name != DEFAULT_CELL]
    return [settings, *others]
