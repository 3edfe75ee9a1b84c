"""uvicorn, as the API runs it: limits that belong to the server rather than to the app.

uvicorn has no deadline for a request's headers: a client sending one header line every few
seconds holds its connection (and a slot of `limit_concurrency`) for as long as it likes, and a
connection that sends nothing at all is never closed. `HeaderTimeoutProtocol` closes a
connection whose request line and headers have not all arrived within
`OUTLIVE_API_HEADER_TIMEOUT_S` of its first byte (or of the connection, for the first request).
The load balancer in front should enforce the same (SECURITY.md); this is the backstop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from outlive.config import Settings

DEFAULT_HEADER_TIMEOUT_S = 10.0


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's head. The deadline is read
    from the config (`outlive_header_timeout_s`), which survives `--workers N` (pickled)."""

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout_s: float = getattr(
            config, "outlive_header_timeout_s", DEFAULT_HEADER_TIMEOUT_S
        )
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()  # a later request on a kept-alive connection

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self._header_timeout_s, self._too_slow)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def uvicorn_config(
    app: Any, host: str, port: int, settings: Settings | None = None, **overrides: Any
) -> Config:
    """The server's options, the limits among them from `settings`."""
    settings = settings or Settings()
    options: dict[str, Any] = {
        "http": HeaderTimeoutProtocol,
        "ws_max_size": settings.ws_max_bytes,  # read (and refused) before authentication
        "ws_per_message_deflate": False,  # tiny frames: deflate would double per-socket memory
        "ws_ping_interval": 20,  # uvicorn's own pings: a dead peer is dropped within 40 s
        "ws_ping_timeout": 20,
        "limit_concurrency": settings.api_limit_concurrency or None,
        "timeout_graceful_shutdown": 10,
        "log_level": "info",
        "access_log": False,
        "log_config": None,  # our root handler formats uvicorn's records too (json or text)
    }
    config = Config(app, host=host, port=port, **(options | overrides))
    config.outlive_header_timeout_s = settings.api_header_timeout_s  # type: ignore[attr-defined]
    return config
