"""Which sockets an API process lets in, apart from who they are (`outlive.app.OutliveApp`): one
over `OUTLIVE_WS_MAX_SOCKETS` is accepted and closed with 1013 (try again later), and every socket
served is counted (`outlive_websocket_connections`)."""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope, Send
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from outlive.realtime.subscribers import CLOSE_TRY_AGAIN
from outlive.telemetry import metrics


async def refuse_socket(scope: Scope, receive: Receive, send: Send) -> None:
    """Accept (with the protocol asked for: a browser fails a handshake without it, and would see
    1006 instead of the code) and close with 1013: try again later."""
    if (await receive())["type"] != "websocket.connect":
        return
    accept: dict[str, Any] = {"type": "websocket.accept"}
    if GRAPHQL_TRANSPORT_WS_PROTOCOL in scope.get("subprotocols", ()):
        accept["subprotocol"] = GRAPHQL_TRANSPORT_WS_PROTOCOL
    await send(accept)
    reason = "too many sockets in this process: retry later"
    await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN, "reason": reason})


class CountedSockets:
    """The view for WebSocket routes, keeping `outlive_websocket_connections` (a class, not a
    function: Starlette would take a function for a `WebSocket` endpoint)."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics.SOCKETS.inc()
        try:
            await self._app(scope, receive, send)
        finally:
            metrics.SOCKETS.dec()
