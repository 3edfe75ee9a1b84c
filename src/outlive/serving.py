"""uvicorn, as the API runs it: limits that belong to the server rather than to the app.

uvicorn has no deadline for a request's headers: a client sending one header line every few
seconds holds its connection (and a slot of uvicorn's `limit_concurrency`) for as long as it likes,
and a connection that sends nothing at all is never closed. `HeaderTimeoutProtocol` closes a
connection whose request line and headers have not all arrived within
`OUTLIVE_API_HEADER_TIMEOUT_S` of its first byte (or of the connection, for the first request).

Nor has uvicorn's httptools parser a limit on a request's size before its body: it gathers a
request line or a header of any length (a 64 MiB header cost 4 s of CPU on `/healthz`). The
same protocol counts the bytes of each request's head as they arrive, before the parser sees
them, and past `OUTLIVE_API_MAX_HEADER_BYTES` answers 431 and closes the connection.

The load balancer in front should enforce both (SECURITY.md); this is the backstop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from outlive.config import Settings

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
_TOO_LARGE = b"request line and headers too large"
_431 = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: " + str(len(_TOO_LARGE)).encode() + b"\r\n"
    b"connection: close\r\n\r\n" + _TOO_LARGE
)


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's head and a cap on its
    size. Both are read from the config (`outlive_header_timeout_s`, `outlive_max_header_bytes`),
    which survives `--workers N` (pickled).

    A head is counted from the connection (the first request) or from the end of the previous
    request (a kept-alive connection) to the end of its headers: what arrives in between goes to
    the parser only as far as the budget allows, so the parser never holds more than the cap."""

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout_s: float = getattr(
            config, "outlive_header_timeout_s", DEFAULT_HEADER_TIMEOUT_S
        )
        self._max_head: int = getattr(config, "outlive_max_header_bytes", DEFAULT_MAX_HEADER_BYTES)
        self._header_timer: asyncio.TimerHandle | None = None
        self._in_head = True  # reading a request line and headers (or waiting for them)
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if not self._in_head:
            super().data_received(data)
            return
        budget = self._max_head - self._head_bytes
        if len(data) <= budget:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        super().data_received(data[:budget])  # the head may end in here
        if self.transport.is_closing():
            return
        if self._in_head:
            self._too_large()
            return
        protocol = self.transport.get_protocol()  # a WebSocket upgrade switches it
        protocol.data_received(data[budget:])

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True  # a later request on a kept-alive connection
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        self._in_head, self._head_bytes = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True  # whatever comes next is the next request's head

    def _too_large(self) -> None:
        self._cancel_header_timer()
        if not self.cycle or self.cycle.response_complete:
            self.transport.write(_431)  # no response of a previous request is under way
        self.transport.close()

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


def connection_backstop(settings: Settings) -> int | None:
    """uvicorn's `limit_concurrency` counts open connections (sockets, idle keep-alives) and
    tasks together, so it is not the cap of either: the app caps in-flight HTTP requests
    (`OUTLIVE_API_LIMIT_CONCURRENCY`) and open sockets (`OUTLIVE_WS_MAX_SOCKETS`) apart
    (`app.OutliveApp`), and uvicorn keeps only a backstop on connections, their sum (None: no
    backstop when either cap is off)."""
    if not settings.api_limit_concurrency or not settings.ws_max_sockets:
        return None
    return settings.api_limit_concurrency + settings.ws_max_sockets


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
        "limit_concurrency": connection_backstop(settings),
        "timeout_graceful_shutdown": 10,
        "log_level": "info",
        "access_log": False,
        "proxy_headers": False,  # the client is read by services/clients.py (trusted proxies)
        "log_config": None,  # our root handler formats uvicorn's records too (json or text)
    }
    config = Config(app, host=host, port=port, **(options | overrides))
    config.outlive_header_timeout_s = settings.api_header_timeout_s  # type: ignore[attr-defined]
    config.outlive_max_header_bytes = settings.api_max_header_bytes  # type: ignore[attr-defined]
    return config
