"""`ErasureReceipt`: what `eraseSubject` deleted (contract §4.2)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.services.erasure import ErasureReceipt as ReceiptRecord


@strawberry.type(description="What one eraseSubject deleted: a repeat finds nothing and counts 0.")
class ErasureReceipt:
    tag: str
    runs: int
    steps: int
    events: int
    signals: int
    deliveries: int = strawberry.field(description="Webhook deliveries (their bodies, attempts).")
    at: datetime

    @classmethod
    def of(cls, r: ReceiptRecord) -> ErasureReceipt:
        return cls(
            tag=r.tag,
            runs=r.runs,
            steps=r.steps,
            events=r.events,
            signals=r.signals,
            deliveries=r.deliveries,
            at=r.at,
        )
