"""Timeline events: durable as they happen, gap-free `seq` per run, all seen by a late reader."""

from __future__ import annotations

import asyncio

import httpx

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services.runs import claim_run
from outlive.workflows.runs import AttemptContext, WorkflowDeps
from tests.support import Api, TenantHandle
from tests.workflows.test_claim import new_run


async def test_concurrent_emitters_get_gap_free_seqs_and_a_late_reader_sees_all(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await new_run(sessions, tenant)
    async with sessions.unit() as uow:
        run = await claim_run(uow, run_id, lease_s=settings.run_heartbeat_s)
    assert run is not None
    async with httpx.AsyncClient() as http:
        deps = WorkflowDeps(
            sessions=sessions, agents=AgentRegistry([]), http=http, settings=settings
        )
        contexts = [AttemptContext(deps, run) for _ in range(10)]

        async def emit_many(ctx: AttemptContext, who: int) -> list[int]:
            return [await ctx.emit("turn", {"who": who, "i": i}) for i in range(20)]

        seqs = await asyncio.gather(*(emit_many(c, n) for n, c in enumerate(contexts)))

    returned = sorted(s for batch in seqs for s in batch)
    assert returned == list(range(2, 202))  # seq 1 is the claim
    for batch in seqs:
        assert batch == sorted(batch)  # one emitter's events keep their order

    body = await api.run(tenant.token, str(run_id), events=True)
    assert body is not None
    assert [e["seq"] for e in body["events"]] == list(range(1, 202))
    page = await api.gql(
        "query($id: ID!) { run(id: $id) { events(after: 150, first: 20) { seq } } }",
        {"id": str(run_id)},
        token=tenant.token,
    )
    assert [e["seq"] for e in page["run"]["events"]] == list(range(151, 171))
