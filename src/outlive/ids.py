"""Typed ids. A public id is a UUID's canonical text; anything else is a caller's error."""

from __future__ import annotations

from typing import NewType
from uuid import UUID

from outlive.errors import BadUserInput

TenantId = NewType("TenantId", UUID)
UserId = NewType("UserId", UUID)
RunId = NewType("RunId", UUID)
EndpointId = NewType("EndpointId", UUID)
DeliveryId = NewType("DeliveryId", UUID)
InvitationId = NewType("InvitationId", UUID)


def parse_uuid(value: str, *, what: str) -> UUID:
    """Parse a public id, or raise `BadUserInput` naming what was expected."""
    try:
        return UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise BadUserInput(f"{value!r} is not a valid {what} id") from None
