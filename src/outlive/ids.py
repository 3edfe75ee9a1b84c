"""Typed ids: each noun's id is a `NewType` over UUID; and the directory's virtual slot a tenant's
id hashes to (`outlive.db.directory`; here, so the CLI parses slot ranges without loading it)."""

from __future__ import annotations

import hashlib
from typing import NewType
from uuid import UUID

TenantId = NewType("TenantId", UUID)
UserId = NewType("UserId", UUID)
TokenId = NewType("TokenId", UUID)
RunId = NewType("RunId", UUID)
EndpointId = NewType("EndpointId", UUID)
DeliveryId = NewType("DeliveryId", UUID)
InvitationId = NewType("InvitationId", UUID)


SLOTS = 1024  # the directory's virtual slots: a tenant's is `home_slot`, a cell serves ranges


def home_slot(tenant_id: UUID) -> int:
    """The slot a tenant's id hashes to: where it goes when its cell has that slot."""
    return int.from_bytes(hashlib.sha256(tenant_id.bytes).digest()[:4], "big") % SLOTS
