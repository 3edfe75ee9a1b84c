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


@strawberry.type(
    description='A range of a large payload stored once (a `{"$blob": ref, "size": n}` in a '
    "step's result or a run's output): its JSON text's bytes [offset, offset + length)."
)
class PayloadRange:
    ref: str
    size: int = strawberry.field(description="The whole payload's bytes.")
    offset: int
    base64: str = strawberry.field(
        description="The range's bytes, base64 (a range may end "
        "inside a UTF-8 character: join the bytes, then decode)."
    )
