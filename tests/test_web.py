"""The web app's pages (`/` and GraphiQL) forbid framing and allow only their own origin."""

from __future__ import annotations

import httpx
import pytest

from outlive.app import build_app
from outlive.config import Settings


@pytest.mark.parametrize(
    ("path", "accept"), [("/", "text/html"), ("/runs/new", "text/html"), ("/graphql", "text/html")]
)
async def test_the_pages_send_a_csp_that_forbids_framing(
    settings: Settings, path: str, accept: str
) -> None:
    app = build_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        response = await client.get(path, headers={"accept": accept})
    assert response.status_code == 200
    assert "text/html" in response.headers["content-type"]
    csp = {
        part.strip().split(" ")[0]: part.strip()
        for part in response.headers["content-security-policy"].split(";")
    }
    assert csp["frame-ancestors"] == "frame-ancestors 'none'"
    assert csp["script-src"] == "script-src 'self'"  # no inline script, no other origin
    assert csp["connect-src"] == "connect-src 'self'"
    assert response.headers["x-frame-options"] == "DENY"
