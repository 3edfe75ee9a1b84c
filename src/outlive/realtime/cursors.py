"""Output cursors: a Redis stream entry id (`<ms>-<seq>`, each half 64 bits), as clients pass
it to `runOutput(after:)` and as the tails compare them."""

from __future__ import annotations

import re

from outlive.errors import BadUserInput

_CURSOR = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")
_U64 = 2**64 - 1


def check_cursor(cursor: str | None) -> str | None:
    """A cursor as given by a client: None, or a Redis entry id (`BadUserInput` otherwise)."""
    if cursor is None:
        return None
    ms, _, seq = cursor.partition("-")
    # Each half of a Redis entry id is a 64-bit unsigned number; the read starts one after it.
    if not _CURSOR.match(cursor) or int(ms) > _U64 or int(seq) >= _U64:
        raise BadUserInput(f"{cursor!r} is not an output cursor (pass a chunk's `cursor`)")
    return cursor


def after(cursor: str) -> str:
    """The smallest entry id after `cursor` (XRANGE's start is inclusive)."""
    ms, _, seq = cursor.partition("-")
    return f"{ms}-{int(seq) + 1}"


def key(cursor: str) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq or 0)


def newer(cursor: str, than: str | None) -> bool:
    return than is None or key(cursor) > key(than)


def latest(a: str | None, b: str) -> str:
    return b if a is None or key(b) > key(a) else a
