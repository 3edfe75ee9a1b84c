"""A run's durable steps as the API shows them (`Run.steps`): `RunStep` and its `StepUsage`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry.scalars import JSON

from outlive.ids import RunId
from outlive.schema.scalars import as_json
from outlive.services.runs import StepRecord


@strawberry.type(description="The model usage one step recorded (`ctx.record_usage`).")
class StepUsage:
    requests: int
    input_tokens: int
    output_tokens: int
    model: str | None
    cost_usd: float | None = strawberry.field(
        description="USD, from the genai-prices table; null when its model has no price."
    )

    @classmethod
    def of(cls, record: StepRecord) -> StepUsage | None:
        """None for a step that recorded no usage (most steps, and a step copied from another
        run: that run paid for it)."""
        if not (record.requests or record.input_tokens or record.output_tokens or record.model):
            return None
        cost = None if record.cost_usd is None else float(record.cost_usd)
        return cls(
            requests=record.requests,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            model=record.model,
            cost_usd=cost,
        )


@strawberry.type(description="A completed durable step of a run (`ctx.step`).")
class RunStep:
    seq: int = strawberry.field(description="Its place in the run's completion order, from 1.")
    name: str
    occurrence: int = strawberry.field(
        description="The how-many-th call of this name in the attempt that ran it, from 1."
    )
    attempt: int = strawberry.field(description="The attempt that ran and recorded it.")
    completed_at: datetime
    run_id: strawberry.Private[RunId]
    started_at: datetime | None = strawberry.field(
        default=None,
        description="When it started (its gate let it; null for steps recorded before that).",
    )
    usage: StepUsage | None = strawberry.field(
        default=None, description="The model usage it recorded; null when it recorded none."
    )

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="What the step returned, as its run's journal recorded it (JSON): the "
        "truth that its partial output (`runOutput`) only previews."
    )
    async def result(self, info: strawberry.Info[Any, Any]) -> JSON | None:
        return as_json(await info.context.step_result(self.run_id, self.seq))

    @classmethod
    def of(cls, record: StepRecord, run_id: RunId) -> RunStep:
        return cls(
            run_id=run_id,
            seq=record.seq,
            name=record.name,
            occurrence=record.occurrence,
            attempt=record.attempt,
            completed_at=record.completed_at,
            started_at=record.started_at,
            usage=StepUsage.of(record),
        )
