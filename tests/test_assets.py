"""`/assets/*` on a checkout whose web app is not built is a 404, not a 500 (issue 19, R6)."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from outlive.app import build_app
from outlive.config import Settings
from outlive.web import HashedAssets


async def test_an_asset_of_an_unbuilt_web_app_is_not_found(tmp_path: Path) -> None:
    directory = tmp_path / "dist" / "assets"  # not built
    app = Starlette(routes=[Mount("/assets", HashedAssets(directory=directory, check_dir=False))])
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/assets/x.js")).status_code == 404
        directory.mkdir(parents=True)  # built later: served without a restart
        (directory / "x.js").write_text("export {}")
        found = await client.get("/assets/x.js")
        assert found.status_code == 200
        assert found.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert (await client.get("/assets/y.js")).status_code == 404


async def test_the_app_answers_404_for_a_missing_asset(settings: Settings) -> None:
    app = build_app(settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        assert (await client.get("/assets/no-such-file-7d1e.js")).status_code == 404
