"""Parsing public ids: a UUID's canonical text; anything else is the caller's error."""

from __future__ import annotations

from uuid import UUID

from outlive.errors import BadUserInput


def parse_uuid(value: str, *, what: str) -> UUID:
    """Parse a public id, or raise `BadUserInput` naming what was expected."""
    try:
        return UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise BadUserInput(f"{value!r} is not a valid {what} id") from None
