"""Scalars: `DateTime` is strawberry's (ISO 8601 with offset); `JSON` is strawberry's JSON."""

from __future__ import annotations

from typing import Any, cast

from strawberry.scalars import JSON


def as_json(value: Any) -> JSON:
    """A JSON-compatible Python value, typed as the `JSON` scalar."""
    return cast(JSON, value)
