"""Encryption at rest per tenant (issue 46): a tenant that encrypts has its step results sealed
by its own data key (wrapped by OUTLIVE_ENCRYPTION_KEY) before they are written, inline and as
blobs; its agent and its GraphQL answers get the values back; no table holds the plaintext. A
tenant that does not encrypt is stored as before. Rotation re-wraps the data keys."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from outlive.agents.demo import DemoInput
from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.db.tx import Sessions
from outlive.errors import RetryableFault
from outlive.services import sealing
from outlive.services.runs.recorded import Filters, read_recorded
from outlive.workflows.runs import WorkflowDeps
from tests.conftest import make_settings
from tests.governance.scan import mentions
from tests.support import Api, Servers, TenantHandle
from tests.workflows.test_lease import deliver, start

pytestmark = [pytest.mark.timeout(300)]

STEPS = "query($id: ID!) { run(id: $id) { status steps(first: 10) { name result } } }"


async def test_a_tenant_that_encrypts_has_its_step_results_sealed(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    key = sealing.new_deployment_key()
    settings = make_settings(
        servers, encryption_key=key, run_heartbeat_s=60, run_retry_delay_s=0.01
    )
    marker = f"secret-{uuid.uuid4().hex}"
    small = {"note": marker}
    large = (marker + " ") * 10_000  # over the blob threshold (256 KiB)

    async def note() -> dict[str, str]:
        return small

    async def document() -> str:
        return large

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        values = [await ctx.step("note", note), await ctx.step("document", document)]
        if values != [small, large]:
            raise AssertionError("a value came back changed")
        if ctx.attempt == 1:  # the next attempt reads both back from the journal
            raise RetryableFault("once more, from the journal")
        return {"ok": True}

    assert await sealing.enable(sessions, sealing.deployment_key(key), tenant.principal.tenant.slug)
    registry = AgentRegistry([Agent("demo", "sealed results", DemoInput, agent)])
    async with httpx.AsyncClient() as http:
        deps = WorkflowDeps(sessions=sessions, agents=registry, http=http, settings=settings)
        sealed_run = await start(sessions, tenant, {})
        assert await deliver(deps, sealed_run) == "retry"
        assert await deliver(deps, sealed_run) == "done"
        found = await mentions(sessions, marker)
        assert found == {}, f"the plaintext is stored in {found}"
        plain_run = await start(sessions, other_tenant, {})
        assert await deliver(deps, plain_run) == "retry"
        assert await deliver(deps, plain_run) == "done"
    assert set(await mentions(sessions, marker)) >= {"run_steps", "blob_parts"}

    async with Api.running(settings) as api:
        mine = await api.gql(STEPS, {"id": str(sealed_run)}, token=tenant.token)
        theirs = await api.gql(STEPS, {"id": str(plain_run)}, token=other_tenant.token)
    assert mine["run"]["status"] == "SUCCEEDED"
    assert mine["run"]["steps"][0] == {"name": "note", "result": small}
    assert theirs["run"]["steps"][0] == {"name": "note", "result": small}
    row = await sessions.one(
        text("SELECT result::text AS r FROM run_steps WHERE run_id = :id AND name = 'note'"),
        id=sealed_run,
    )
    assert row is not None
    assert sealing.is_sealed(row["r"])

    recorded = await read_recorded(  # `outlive replay` opens them with the deployment key
        sessions, Filters(tenant=tenant.principal.tenant.slug), kek=sealing.deployment_key(key)
    )
    assert [r.run.id for r in recorded] == [sealed_run]
    assert json.loads(recorded[0].steps["note", 1]) == small
    assert json.loads(recorded[0].steps["document", 1]) == large

    new_key = sealing.new_deployment_key()  # rotation: the data key is re-wrapped, not changed
    old, new = sealing.deployment_key(key), sealing.deployment_key(new_key)
    done, _ = await sealing.rewrap(sessions, old, new)  # other tests' tenants: other keys
    assert done >= 1
    async with Api.running(make_settings(servers, encryption_key=new_key)) as api:
        again = await api.gql(STEPS, {"id": str(sealed_run)}, token=tenant.token)
    assert again["run"]["steps"][0] == {"name": "note", "result": small}
