"""The network guard of `outlive replay`: while it is on, any socket connect and any name
lookup made in this process fails (`Offline`, an `OSError`) and is counted. Replay reads
everything it needs from PostgreSQL first, over connections already open, then runs the
agents' code under the guard: no model call, no HTTP request, no new connection of any kind.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class Offline(OSError):
    """A network call made while the guard was on."""


@dataclass
class Guard:
    """What the guard refused: how many calls, and the first few targets."""

    refused: int = 0
    targets: list[str] = field(default_factory=list)
    last: str = ""

    def refuse(self, what: str, target: Any) -> None:
        self.refused += 1
        self.last = f"{what} {target!r}"
        if len(self.targets) < 10:
            self.targets.append(self.last)
        raise Offline(f"outlive replay is offline: {what} {target!r} refused")


_PATCHED = (
    (socket.socket, "connect"),
    (socket.socket, "connect_ex"),
    (socket, "create_connection"),
    (socket, "getaddrinfo"),
)


@contextmanager
def offline(guard: Guard) -> Iterator[Guard]:
    """Refuse every socket connect and name lookup in this process until the block ends."""
    saved = [(owner, name, getattr(owner, name)) for owner, name in _PATCHED]

    def connect(sock: socket.socket, address: Any, *_: Any) -> Any:
        guard.refuse("connect to", address)

    def create_connection(address: Any, *_: Any, **__: Any) -> Any:
        guard.refuse("connect to", address)

    def getaddrinfo(host: Any, port: Any, *_: Any, **__: Any) -> Any:
        guard.refuse("look up", host)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect  # type: ignore[method-assign,assignment]
    socket.create_connection = create_connection
    socket.getaddrinfo = getaddrinfo
    try:
        yield guard
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
