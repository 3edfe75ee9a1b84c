"""Serving the built web app (`web/` in the repository, built into `outlive/web/dist`).

`/` and every path no other route claims answer `index.html` (the app routes in the browser);
`/assets/*` are Vite's content-hashed files, cached for a year; `GET /graphql` in a browser is
GraphiQL (`graphiql.html`), from the same build: nothing comes from a CDN.

Both pages carry a Content-Security-Policy that allows this origin only (scripts, workers,
fetches and the WebSocket) and no framing at all (`frame-ancestors 'none'`, and X-Frame-Options
for older browsers): the pages hold a bearer token in localStorage, so nothing else may run in
them and no other site may overlay them. Styles may be inline (GraphiQL's editor sets them).
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

DIST = Path(__file__).parent / "dist"

_NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>Outlive</title>
<p>The web app is not built. Run <code>npm --prefix web ci && npm --prefix web run build</code>
(Node.js 20 or newer), or start <code>outlive dev</code>, which builds it;
or use GraphiQL at <a href="/graphql">/graphql</a>.</p>"""

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

IMMUTABLE = "public, max-age=31536000, immutable"


class HashedAssets(StaticFiles):
    """Vite's `/assets`: every name carries a content hash, so a file never changes. On a
    checkout whose web app is not built there is no directory at all: every asset is a 404
    (starlette's own check would turn each request into a 500) until a build makes them."""

    async def check_config(self) -> None:
        if self.directory is not None and not Path(self.directory).exists():
            return  # not built (yet): nothing to serve, which is a 404, not a server error
        await super().check_config()

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        if response.status_code == 200:
            response.headers["Cache-Control"] = IMMUTABLE
        return response


def graphiql_response() -> Response:
    """GraphiQL, from the package's own files when the web build has them."""
    page = DIST / "graphiql.html"
    if page.is_file():
        return FileResponse(page, headers=PAGE_HEADERS)
    return HTMLResponse(
        _NOT_BUILT.replace("or use GraphiQL at", "then reload GraphiQL at"), headers=PAGE_HEADERS
    )


def web_routes() -> list[BaseRoute]:
    index = DIST / "index.html"

    async def spa(_: Request) -> Response:
        if index.is_file():
            return FileResponse(index, headers=PAGE_HEADERS)
        return HTMLResponse(_NOT_BUILT, headers=PAGE_HEADERS)

    return [
        # check_dir=False: a build made after the server started is served without a restart
        Mount("/assets", HashedAssets(directory=DIST / "assets", check_dir=False), name="assets"),
        Route("/", spa),
        Route("/{path:path}", spa),
    ]
