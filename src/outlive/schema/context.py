"""What schema types may ask of the request context (implemented in `outlive.resolvers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

    from outlive.ids import EndpointId, RunId
    from outlive.services.runs import EventRecord, RunPage, RunRecord, StepRecord
    from outlive.services.runs.tree import StatusCount
    from outlive.services.webhooks import DeliveryRecord


class SchemaContext(Protocol):
    async def endpoint_deliveries(
        self,
        endpoint_id: EndpointId,
        *,
        first: int,
        status: Any = None,
        before: datetime | None = None,
    ) -> list[DeliveryRecord]: ...

    async def run_events(self, run_id: RunId, *, after: int, first: int) -> list[EventRecord]: ...

    async def run_steps(self, run_id: RunId, *, after: int, first: int) -> list[StepRecord]: ...

    async def step_result(self, run_id: RunId, seq: int) -> Any: ...
    async def tenant_retention_days(self) -> int: ...
    async def run_retries(self, run_id: RunId) -> list[RunId]: ...

    async def run_children(
        self, run: RunRecord, *, first: int, after: str | None, statuses: Any
    ) -> RunPage: ...

    async def run_child_counts(self, run_id: RunId) -> list[StatusCount]: ...

    async def run_ancestors(self, run_id: RunId) -> list[RunRecord]: ...
