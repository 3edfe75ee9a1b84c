"""Model calls made and not recorded (`run_calls`): what a provider billed that a run never kept.

A model step writes a row before each call (`begin_call`). The statement that records the step
deletes the rows of its attempt (`queries.STEP_DONE_CALLED`); a call the endpoint refused with an
HTTP error (not billed) deletes its own (`refused_call`); a call cut in the process (a timeout, a
stream broken off) keeps its row, ended, with the tokens the stream reported (`cut_call`). A
worker killed mid-call, or between the answer and the record, leaves its row as it was. So the
rows of a run that no attempt still executes are its abandoned requests (`usage_tokens`:
`RunUsage.abandonedRequests`, round five F5).
"""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId

BEGIN_CALL = prepare(
    text(
        "INSERT INTO run_calls (run_id, attempt, step, occurrence, model)"
        " VALUES (:run_id, :attempt, :step, :occurrence, CAST(:model AS text)) RETURNING seq"
    )
)
REFUSED_CALL = prepare(text("DELETE FROM run_calls WHERE seq = :seq RETURNING seq"))
CUT_CALL = prepare(
    text(
        "UPDATE run_calls SET ended_at = now(), reason = :reason, input_tokens = :input_tokens,"
        " output_tokens = :output_tokens WHERE seq = :seq RETURNING seq"
    )
)


async def begin_call(
    sessions: Sessions,
    tenant_id: TenantId,
    run_id: RunId,
    *,
    attempt: int,
    step: str,
    occurrence: int,
    model: str | None,
) -> int:
    """A model call of the step (`step`, `occurrence`) is about to be made: its row's `seq`."""
    async with sessions.unit(tenant_id, single_statement=True) as uow:
        row = await uow.one(
            BEGIN_CALL,
            run_id=run_id,
            attempt=attempt,
            step=step,
            occurrence=occurrence,
            model=model,
        )
    assert row is not None  # noqa: S101 (an INSERT … RETURNING)
    return int(row["seq"])


async def refused_call(sessions: Sessions, tenant_id: TenantId, seq: int) -> None:
    """The endpoint refused the call (an HTTP error status): nothing was billed."""
    async with sessions.unit(tenant_id, single_statement=True) as uow:
        await uow.one(REFUSED_CALL, seq=seq)


async def cut_call(
    sessions: Sessions,
    tenant_id: TenantId,
    seq: int,
    *,
    reason: str,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> None:
    """The call was cut in the process (a timeout, a stream broken off, a cancel): billed,
    maybe in part; `input_tokens` / `output_tokens` as the stream reported them, if it did."""
    async with sessions.unit(tenant_id, single_statement=True) as uow:
        await uow.one(
            CUT_CALL,
            seq=seq,
            reason=reason[:200],
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
