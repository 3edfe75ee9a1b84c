"""Typed ids: each noun's id is a `NewType` over UUID."""

from __future__ import annotations

from typing import NewType
from uuid import UUID

TenantId = NewType("TenantId", UUID)
UserId = NewType("UserId", UUID)
TokenId = NewType("TokenId", UUID)
RunId = NewType("RunId", UUID)
EndpointId = NewType("EndpointId", UUID)
DeliveryId = NewType("DeliveryId", UUID)
InvitationId = NewType("InvitationId", UUID)
