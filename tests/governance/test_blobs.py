"""Large payloads stored once (issue 46): step results over `OUTLIVE_BLOB_THRESHOLD_BYTES` go to
`blobs`, once per tenant and content; the agent gets its values back as before (also a later
attempt, from the journal); a GraphQL answer carries a small reference and `payload` reads the
value in ranges; `eraseSubject` deletes the blobs only the subject's runs held.

Sized for CI: `OUTLIVE_BLOB_RESULTS` parallel results (50) of 2 MiB, of which
`OUTLIVE_BLOB_UNIQUE` (10) differ; the database grows by at most 1.05x the unique bytes."""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from outlive.agents.demo import DemoInput
from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.errors import RetryableFault
from outlive.services.runs.recorded import Filters, read_recorded
from outlive.workflows.offline import Guard
from outlive.workflows.replay import replay_runs
from outlive.workflows.runs import WorkflowDeps
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, Servers, TenantHandle
from tests.workflows.test_claim import read
from tests.workflows.test_lease import deliver, start

pytestmark = [pytest.mark.timeout(300)]

RESULTS = int(os.environ.get("OUTLIVE_BLOB_RESULTS", "50"))
UNIQUE = int(os.environ.get("OUTLIVE_BLOB_UNIQUE", "10"))
SIZE = 2 * 1024 * 1024
STEPS = """query($id: ID!) { run(id: $id) { status output steps(first: 1000) { result } } }"""
PAYLOAD = """query($id: ID!, $ref: String!, $offset: Int!) {
    payload(runId: $id, ref: $ref, offset: $offset) { size offset base64 } }"""
ERASE = "mutation($tag: String!) { eraseSubject(tag: $tag) { runs steps } }"
_SIZES = text(
    "SELECT sum(pg_total_relation_size(c)) AS n FROM unnest("
    "ARRAY['blobs', 'blob_parts', 'blob_refs', 'run_steps', 'runs', 'run_events']::regclass[]) c"
)


def tool_result(i: int, salt: str) -> str:
    """2 MiB of text that does not compress, the same for i and i + UNIQUE."""
    return _unique_result(i % UNIQUE, salt)


@functools.lru_cache(maxsize=64)
def _unique_result(k: int, salt: str) -> str:
    seed = f"{salt}:{k}".encode()
    blocks, size = [], 0
    while size < SIZE * 3 // 4:
        block = hashlib.shake_256(seed + size.to_bytes(8, "big")).digest(64 * 1024)
        blocks.append(block)
        size += len(block)
    return base64.b64encode(b"".join(blocks))[:SIZE].decode()


@pytest.fixture
async def deps_for(
    servers: Servers, sessions: Sessions
) -> AsyncIterator[Callable[[AgentRegistry], WorkflowDeps]]:
    settings = make_settings(servers, run_heartbeat_s=60, run_retry_delay_s=0.01)
    async with httpx.AsyncClient() as http:
        yield lambda agents: WorkflowDeps(
            sessions=sessions, agents=agents, http=http, settings=settings
        )


async def db_bytes(sessions: Sessions) -> int:
    row = await sessions.one(_SIZES)
    return int(row["n"]) if row is not None else 0


async def test_parallel_large_results_are_stored_once_and_read_back(
    deps_for: Callable[[AgentRegistry], WorkflowDeps],
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    api: Api,
) -> None:
    salt = uuid.uuid4().hex
    seen: list[list[int]] = []

    async def tool(i: int) -> str:
        return tool_result(i, salt)

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        values = await asyncio.gather(*(ctx.step("tool", tool, i) for i in range(RESULTS)))
        seen.append([len(v) for v in values])
        if values != [tool_result(i, salt) for i in range(RESULTS)]:
            raise AssertionError("a value came back changed")
        if ctx.attempt == 1:  # the next attempt reads every result back from the journal
            raise RetryableFault("once more, from the journal")
        return {"results": len(values)}

    run_id = await start(sessions, tenant, {})
    tag = f"user:{uuid.uuid4().hex[:12]}"
    await sessions.execute(
        text("UPDATE runs SET tags = ARRAY[:tag] WHERE id = :id"), tag=tag, id=run_id
    )
    deps = deps_for(AgentRegistry([Agent("demo", "large results", DemoInput, agent)]))
    before = await db_bytes(sessions)
    first_delivery = await deliver(deps, run_id)
    assert first_delivery == "retry", (await read(sessions, tenant, run_id)).error
    assert await deliver(deps, run_id) == "done"
    grew = await db_bytes(sessions) - before
    run = await read(sessions, tenant, run_id)
    assert run.status == RunStatus.SUCCEEDED
    assert seen == [[SIZE] * RESULTS] * 2
    unique_bytes = UNIQUE * (SIZE + 2)  # each JSON string with its quotes
    assert grew <= 1.05 * unique_bytes, f"grew {grew} bytes for {unique_bytes} unique"
    count = await sessions.one(
        text("SELECT count(*) AS n FROM blobs WHERE tenant_id = :t"), t=tenant.id
    )
    assert count is not None
    assert count["n"] == UNIQUE

    response = await api.post(STEPS, {"id": str(run_id)}, token=tenant.token)
    assert len(response.content) < 64 * 1024  # references, not 100 MiB
    steps = response.json()["data"]["run"]["steps"]
    first = steps[0]["result"]
    assert set(first) == {"$blob", "size"}
    assert first["size"] == SIZE + 2
    got, offset = b"", 0
    while offset < first["size"]:
        part = (
            await api.gql(
                PAYLOAD,
                {"id": str(run_id), "ref": first["$blob"], "offset": offset},
                token=tenant.token,
            )
        )["payload"]
        got += base64.b64decode(part["base64"])
        offset += len(base64.b64decode(part["base64"]))
    assert hashlib.sha256(got).hexdigest() == first["$blob"]
    assert json.loads(got) in [tool_result(i, salt) for i in range(UNIQUE)]

    variables = {"id": str(run_id), "ref": first["$blob"], "offset": 0}
    made = await api.gql(
        "mutation($id: ID!) { createRunReadToken(id: $id) }",
        {"id": str(run_id)},
        token=tenant.token,
    )
    reader = (await api.gql(PAYLOAD, variables, token=made["createRunReadToken"]))["payload"]
    assert base64.b64decode(reader["base64"]) == got[: len(base64.b64decode(reader["base64"]))]
    with pytest.raises(GraphQLError) as theirs:  # another tenant's token reads nothing of it
        await api.gql(PAYLOAD, variables, token=other_tenant.token)
    assert theirs.value.codes == ["NOT_FOUND"]

    erased = (await api.gql(ERASE, {"tag": tag}, token=tenant.token))["eraseSubject"]
    assert erased == {"runs": 1, "steps": RESULTS}
    count = await sessions.one(
        text("SELECT count(*) AS n FROM blobs WHERE tenant_id = :t"), t=tenant.id
    )
    assert count is not None
    assert count["n"] == 0


async def test_replay_reads_large_results_offline(
    deps_for: Callable[[AgentRegistry], WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    """`outlive replay` resolves a step result stored as a blob (read only, one statement for
    the page's blobs): the code gets the value it got live, so the run replays as compatible."""
    salt = uuid.uuid4().hex
    big = [tool_result(i, salt)[: 300 * 1024] for i in range(3)]  # over the 256 KiB threshold

    async def tool(i: int) -> str:
        return big[i % 2]  # two steps share a blob

    async def agent(ctx: RunContext, params: DemoInput) -> Any:
        values = [await ctx.step("tool", tool, i) for i in range(3)]
        if values != [big[0], big[1], big[0]]:
            raise AssertionError("a value came back changed")
        return {"n": len(values)}

    registry = AgentRegistry([Agent("demo", "large results", DemoInput, agent)])
    deps = deps_for(registry)
    run_id = await start(sessions, tenant, {})
    assert await deliver(deps, run_id) == "done"
    held = await sessions.one(
        text("SELECT count(*) AS n FROM blob_refs WHERE run_id = :id"), id=run_id
    )
    assert held is not None
    assert held["n"] == 2

    slug = tenant.principal.tenant.slug
    recorded = await read_recorded(sessions, Filters(tenant=slug, agent="demo"))
    assert [str(r.run.id) for r in recorded] == [str(run_id)]
    assert sorted(len(v) for v in recorded[0].steps.values()) == [len(json.dumps(big[0]))] * 3
    guard = Guard()
    verdicts = await replay_runs(recorded, registry, deps.settings, guard)
    assert [v.verdict for v in verdicts] == ["compatible"]
    assert verdicts[0].answered == 3
    assert guard.refused == 0
