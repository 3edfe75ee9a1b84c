"""What schema types may ask of the request context (implemented in `outlive.resolvers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from outlive.ids import RunId
    from outlive.services.runs import EventRecord


class SchemaContext(Protocol):
    async def run_events(self, run_id: RunId, *, after: int, first: int) -> list[EventRecord]: ...
