"""A token made before tokens named their tenant (`olv_<random>`, no tenant part) keeps working
after its tenant moved off the default cell: the move lists its tokens' hashes in the
directory (`old_tokens`) and each API process routes by that list (docs/cells.md)."""

from __future__ import annotations

import secrets

from sqlalchemy import text

from outlive.moves import move_tenant
from outlive.services.tenants import TOKEN_PREFIX, hash_token, token_tenant
from tests.cells.conftest import TwoCells, served, tenant_on
from tests.cells.test_move import runs_on, start
from tests.support import Api

VIEWER = "{ viewer { tenant { slug } } }"


async def old_token(two_cells: TwoCells, slug: str) -> str:
    """A token as minted before round five, for the tenant's first user, on the default cell."""
    token = f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    assert token_tenant(token) is None
    async with two_cells.sessions["default"].unit() as uow:
        await uow.session.execute(
            text(
                "INSERT INTO api_tokens (tenant_id, user_id, token_hash, role)"
                " SELECT t.id, u.id, :h, u.role FROM tenants t JOIN users u ON u.tenant_id = t.id"
                " WHERE t.slug = :slug"
            ),
            {"h": hash_token(token), "slug": slug},
        )
    return token


async def test_an_old_token_follows_its_moved_tenant(two_cells: TwoCells) -> None:
    tenant_id, _, slug = await tenant_on(two_cells, "default")
    _, stranger, _ = await tenant_on(two_cells, "default")
    token = await old_token(two_cells, slug)
    async with served(two_cells) as client:
        api = Api(client)
        assert (await api.gql(VIEWER, token=token))["viewer"]["tenant"]["slug"] == slug
        await move_tenant(two_cells.settings, slug, "b")
        response = await api.post(VIEWER, token=token)  # the view has the move's list
        assert response.status_code == 200, response.text
        assert response.json()["data"]["viewer"]["tenant"]["slug"] == slug
        run_id = await start(api, token, "after", {"turns": 1})  # written on its new cell
        assert [str(r["id"]) for r in await runs_on(two_cells, "b", tenant_id)] == [run_id]
        wrong = await api.post(VIEWER, token=f"{TOKEN_PREFIX}{secrets.token_urlsafe(32)}")
        assert wrong.status_code == 401  # an unknown old-format token: the default cell's no
        assert (await api.gql(VIEWER, token=stranger))["viewer"]["tenant"]["slug"] != slug
    assert await two_cells.directory.old_tokens() != {}
