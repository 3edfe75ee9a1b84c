"""What a run cost, honestly (issue 40): `Run.usage` sums what the run's steps recorded, prices
what the price table knows and names the models it does not (one unpriced model no longer hides
a day's cost: F12), counts apart the calls billed and never kept (F5), and `Run.treeUsage` adds
the run's descendants (F13)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy import text

from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services.usage_tokens import usage_of_runs, usage_tokens
from tests.support import TenantHandle

INSERT_RUN = text(
    "INSERT INTO runs (tenant_id, agent, input, status, attempt, parent_id, root_id, parent_step,"
    " key) VALUES (:tenant, 'demo', '{}', :status, 2, :parent, :root, :step, :key) RETURNING id"
)
INSERT_STEP = text(
    "INSERT INTO run_steps (run_id, name, occurrence, seq, attempt, result, requests,"
    " input_tokens, output_tokens, model, cost_usd) VALUES (:run, 'model.request', :n, :n, 1,"
    " 'null', 1, :inputs, :outputs, :model, :cost)"
)
INSERT_CALL = text(
    "INSERT INTO run_calls (run_id, attempt, step, occurrence, model, ended_at, input_tokens)"
    " VALUES (:run, :attempt, 'model.request', 9, 'gpt-4o-mini',"
    " CASE WHEN :cut THEN now() END, :inputs)"
)


async def _run(
    sessions: Sessions, tenant: TenantHandle, *, parent: Any = None, root: Any = None, **kw: Any
) -> UUID:
    async with sessions.unit(tenant.id) as uow:
        row = await uow.one(
            INSERT_RUN,
            tenant=tenant.id,
            status=kw.get("status", "SUCCEEDED"),
            parent=parent,
            root=root,
            step=None if parent is None else f"demo#{kw['n']}",
            key=f"usage-{kw.get('n', 0)}-{parent}",
        )
    assert row is not None
    return UUID(str(row["id"]))


async def _steps(sessions: Sessions, run: UUID, *steps: tuple[int, int, str, str | None]) -> None:
    async with sessions.unit() as uow:
        for n, (inputs, outputs, model, cost) in enumerate(steps, start=1):
            await uow.execute(
                INSERT_STEP, run=run, n=n, inputs=inputs, outputs=outputs, model=model,
                cost=None if cost is None else Decimal(cost),
            )  # fmt: skip


async def test_a_cost_sums_what_is_priced_and_names_the_unpriced_models(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    run = await _run(sessions, tenant)
    await _steps(
        sessions, run, (100, 10, "gpt-4o-mini", "0.25"), (50, 5, "tiny", None), (1, 1, "x", None)
    )
    found = (await usage_of_runs(sessions, [RunId(run)]))[RunId(run)]
    days = await usage_tokens(sessions, TenantId(tenant.id), days=1)

    assert (found.requests, found.input_tokens, found.output_tokens) == (3, 151, 16)
    assert found.cost_usd == Decimal("0.25")  # not null: the priced part
    assert found.unpriced_models == ("tiny", "x")
    assert [(d.cost_usd, d.unpriced_models) for d in days] == [(Decimal("0.25"), ("tiny", "x"))]


async def test_calls_billed_and_never_kept_are_counted_apart_once_no_attempt_executes_them(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    settled = await _run(sessions, tenant, n=1)
    running = await _run(sessions, tenant, status="RUNNING", n=2)
    async with sessions.unit() as uow:
        for run, attempt, cut, inputs in [
            (settled, 1, False, 0),  # killed mid-call: left as it was
            (settled, 2, True, 40),  # cut in the process, with what the stream reported
            (running, 2, False, 0),  # in flight in the attempt that holds the run: not yet
            (running, 1, False, 0),  # an earlier attempt's: abandoned
        ]:
            await uow.execute(INSERT_CALL, run=run, attempt=attempt, cut=cut, inputs=inputs)
    found = await usage_of_runs(sessions, [RunId(settled), RunId(running)])

    assert (found[RunId(settled)].requests, found[RunId(settled)].abandoned_requests) == (0, 2)
    assert found[RunId(settled)].abandoned_input_tokens == 40
    assert found[RunId(running)].abandoned_requests == 1


async def test_a_tree_usage_sums_the_run_and_all_its_descendants(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    root = await _run(sessions, tenant)
    child = await _run(sessions, tenant, parent=root, root=root, n=1)
    other = await _run(sessions, tenant, parent=root, root=root, n=2)
    grandchild = await _run(sessions, tenant, parent=child, root=root, n=3)
    elsewhere = await _run(sessions, tenant, n=4)  # another tree: never counted
    for run, inputs in [(root, 1), (child, 10), (other, 100), (grandchild, 1000), (elsewhere, 7)]:
        await _steps(sessions, run, (inputs, 1, "gpt-4o-mini", "0.5"))
    async with sessions.unit() as uow:
        await uow.execute(INSERT_CALL, run=grandchild, attempt=1, cut=True, inputs=3)
    trees = await usage_of_runs(sessions, [RunId(root), RunId(child)], trees=True)
    own = await usage_of_runs(sessions, [RunId(root)])

    assert (trees[RunId(root)].requests, trees[RunId(root)].input_tokens) == (4, 1111)
    assert trees[RunId(root)].cost_usd == Decimal("2.0")
    assert trees[RunId(root)].abandoned_requests == 1
    assert (trees[RunId(child)].requests, trees[RunId(child)].input_tokens) == (2, 1010)
    assert own[RunId(root)].input_tokens == 1
