"""Every tenant-scoped CLI command acts on the tenant's cell (`outlive.cli.cell_of`): a tenant on
cell `b` is paused, resumed, limited, given a retention, erased from and listed there, and its
token revoked there; the default cell is not touched. A tenant a move holds is refused."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from outlive.cli.common import CliError
from outlive.cli.governance import erase_subject, set_retention
from outlive.cli.tenants import pause_tenant, set_tenant_limits
from outlive.cli.tokens import list_tokens, revoke_token
from tests.cells.conftest import TwoCells, tenant_on


async def row(two_cells: TwoCells, cell: str, slug: str) -> dict[str, Any] | None:
    found = await two_cells.sessions[cell].one(
        text(
            "SELECT t.paused_at, t.max_running_runs, t.retention_days,"
            " (SELECT count(*) FROM api_tokens a WHERE a.tenant_id = t.id"
            "  AND a.revoked_at IS NOT NULL) AS revoked FROM tenants t WHERE t.slug = :s"
        ),
        s=slug,
    )
    return None if found is None else dict(found)


async def test_tenant_commands_act_on_the_tenants_cell(two_cells: TwoCells) -> None:
    settings = two_cells.settings
    tenant_id, _, slug = await tenant_on(two_cells, "b")
    await pause_tenant(settings, slug, paused=True)
    assert (await row(two_cells, "b", slug) or {})["paused_at"] is not None
    await pause_tenant(settings, slug, paused=False)
    await set_tenant_limits(settings, slug, {"max_running_runs": 7})
    await set_retention(settings, slug, 12)
    assert "erased tag" in await erase_subject(settings, slug, "subject-1")
    listed = await list_tokens(settings, slug)
    assert len(listed) == 2  # the header, its one token
    assert slug in listed[1]
    assert any(slug in line for line in await list_tokens(settings, None))  # every cell's
    await revoke_token(settings, listed[1].split("\t")[0])
    found = await row(two_cells, "b", slug)
    assert found == {"paused_at": None, "max_running_runs": 7, "retention_days": 12, "revoked": 1}
    assert await row(two_cells, "default", slug) is None  # nothing reached the default cell

    await two_cells.directory.hold(tenant_id, held=True)
    with pytest.raises(CliError, match="being moved"):
        await pause_tenant(settings, slug, paused=True)
