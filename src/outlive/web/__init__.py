"""Serving the built web app (`web/` in the repository, built into `outlive/web/dist`)."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

DIST = Path(__file__).parent / "dist"

_NOT_BUILT = """<!doctype html><meta charset="utf-8"><title>Outlive</title>
<p>The web app is not built. Run <code>npm --prefix web ci && npm --prefix web run build</code>,
or use GraphiQL at <a href="/graphql">/graphql</a>.</p>"""


def graphiql_response() -> Response:
    """GraphiQL, from the package's own files when the web build has them."""
    page = DIST / "graphiql.html"
    if page.is_file():
        return FileResponse(page, headers={"Cache-Control": "no-cache"})
    return HTMLResponse(_NOT_BUILT.replace("or use GraphiQL at", "then reload GraphiQL at"))


def web_routes() -> list[BaseRoute]:
    index = DIST / "index.html"

    async def spa(_: Request) -> Response:
        if index.is_file():
            return FileResponse(index, headers={"Cache-Control": "no-cache"})
        return HTMLResponse(_NOT_BUILT)

    routes: list[BaseRoute] = []
    if (DIST / "assets").is_dir():
        routes.append(Mount("/assets", StaticFiles(directory=DIST / "assets"), name="assets"))
    routes += [Route("/", spa), Route("/{path:path}", spa)]
    return routes
