"""Code versions at run time, through GraphQL (contract §4.2, §7 "Versions", issue 43): each run
records its agent's code version when it starts and each step the version that recorded it;
`ctx.patched` answers once per run; a run resumed on code that does not reach the steps it
recorded is held WAITING for "version" (not FAILED, nothing bought again), resumes with
`resumeRun` once a fix is deployed, and `cancelRun` settles it. The deploys are in-process
workers with another `OUTLIVE_AGENT_MODULES` (`tests.version_agents`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.worker import WorkerHost
from tests import version_agents
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle

pytestmark = [pytest.mark.timeout(300)]

WAITING_RUNS = int(os.environ.get("OUTLIVE_VERSIONS_WAITING_RUNS", "24"))  # the issue: 200

RUN = """query($id: ID!) { run(id: $id) { id status waitingFor codeVersion error output
    events(first: 1000) { type data } } }"""
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id status } } }"
SIGNAL = 'mutation($id: ID!) { signalRun(input: {id: $id, name: "go"}) { accepted } }'
RESUME = "mutation($id: ID!) { resumeRun(id: $id) { id status } }"
CANCEL = "mutation($id: ID!) { cancelRun(id: $id) { id status } }"


def deployed(servers: Servers, edit: str) -> Settings:
    return make_settings(servers, agent_modules=[f"tests.version_agents:{edit}"])


@asynccontextmanager
async def worker(servers: Servers, edit: str) -> AsyncIterator[WorkerHost]:
    """A worker with the `pipeline` of `edit` deployed (`tests.version_agents`)."""
    host = WorkerHost(deployed(servers, edit), concurrency=8)
    await host.start()
    try:
        yield host
    finally:
        await host.stop()


@pytest.fixture
async def api(servers: Servers) -> AsyncIterator[Api]:
    async with Api.running(deployed(servers, "V1")) as running:
        yield running


@pytest.fixture
async def watch(servers: Servers, sessions: Sessions, tenant: TenantHandle) -> Any:
    async with NudgeWatch(servers.redis_url, sessions, tenant.id) as watching:
        yield watching


async def start(api: Api, tenant: TenantHandle, key: str, **input: Any) -> str:
    options = {"agent": "pipeline", "key": key, "input": input}
    return str((await api.gql(START, {"i": options}, token=tenant.token))["startRun"]["run"]["id"])


async def read(api: Api, tenant: TenantHandle, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await api.gql(RUN, {"id": run_id}, token=tenant.token))["run"]
    return found


async def until(
    watch: NudgeWatch, api: Api, tenant: TenantHandle, run_ids: list[str], **want: Any
) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        runs = [await read(api, tenant, run_id) for run_id in run_ids]
        return runs if all(r[k] == v for r in runs for k, v in want.items()) else None

    return await watch.until_true(check, 120, f"{len(run_ids)} run(s) {want}")


async def journal(sessions: Sessions, run_id: str) -> list[tuple[str, int, Any, str | None]]:
    rows = await sessions.all(
        text(
            "SELECT name, occurrence, result, code_version FROM run_steps WHERE run_id = :id"
            " ORDER BY seq"
        ),
        id=run_id,
    )
    return [(r["name"], r["occurrence"], r["result"], r["code_version"]) for r in rows]


async def test_runs_and_steps_record_their_code_version_and_agents_serve_theirs(
    servers: Servers, api: Api, tenant: TenantHandle, watch: NudgeWatch, sessions: Sessions
) -> None:
    agents = await api.gql("{ agents { name codeVersion } }", token=tenant.token)
    versions = {a["name"]: a["codeVersion"] for a in agents["agents"]}
    assert versions["pipeline"] == "v1"  # declared
    assert versions["demo"].startswith("h:")  # a hash of its code
    assert len(versions["demo"]) == 18
    async with worker(servers, "V1"):
        run_id = await start(api, tenant, "a", items=1, wait=True)
        [held] = await until(watch, api, tenant, [run_id], status="WAITING", waitingFor="go")
    assert held["codeVersion"] == "v1"
    async with worker(servers, "REORDERED"):  # a compatible deploy: the run goes on there
        await api.gql(SIGNAL, {"id": run_id}, token=tenant.token)
        [done] = await until(watch, api, tenant, [run_id], status="SUCCEEDED")
    assert done["codeVersion"] == "v1"  # the version it started on
    assert [(n, v) for n, _, _, v in await journal(sessions, run_id)] == [
        ("fetch", "v1"),
        ("plan", "v1"),
        ("item", "v1"),
        ("write", "reordered"),  # each step: the version that recorded it
    ]


async def test_a_run_resumed_on_code_that_does_not_reach_its_steps_is_held_then_fixed(
    servers: Servers, api: Api, tenant: TenantHandle, watch: NudgeWatch, sessions: Sessions
) -> None:
    async with worker(servers, "V1"):
        fixed, cancelled = (
            await start(api, tenant, "f", wait=True),
            await start(api, tenant, "c", wait=True),
        )
        await until(watch, api, tenant, [fixed, cancelled], status="WAITING", waitingFor="go")
    bought = version_agents.BOUGHT["fetch"]
    async with worker(servers, "RENAMED"):  # `fetch` renamed `load`, without a patch
        for run_id in (fixed, cancelled):
            await api.gql(SIGNAL, {"id": run_id}, token=tenant.token)
        held = await until(
            watch, api, tenant, [fixed, cancelled], status="WAITING", waitingFor="version"
        )
        version = [e["data"] for e in held[0]["events"] if e["type"] == "version"]
        assert version == [
            {
                "for": "version",
                "kind": "diverged",
                "step": "load",
                "occurrence": 1,
                "why": "not in the journal, where recorded steps remain (next recorded: fetch #1)",
                "codeVersion": "renamed",
                "verdict": "diverged at load #1: not in the journal, where recorded steps"
                " remain (next recorded: fetch #1)",
            }
        ]
        cancel = await api.gql(CANCEL, {"id": cancelled}, token=tenant.token)
        assert cancel["cancelRun"]["status"] == "CANCELLED"
    assert version_agents.BOUGHT["fetch"] == bought  # `load` never ran: nothing bought again
    async with worker(servers, "PATCHED"):  # the fix: the rename behind ctx.patched
        await api.gql(RESUME, {"id": fixed}, token=tenant.token)
        [done] = await until(watch, api, tenant, [fixed], status="SUCCEEDED")
    assert done["output"]["wrote"] == "wrote 3 pages of report"
    assert version_agents.BOUGHT["fetch"] == bought
    steps = [(n, o, r) for n, o, r, _ in await journal(sessions, fixed)]
    assert ("patched:load", 1, False) in steps  # the old run keeps the old branch, recorded
    assert not any(n == "load" for n, _, _ in steps)


async def test_waiting_runs_survive_a_deploy_that_renames_a_step_behind_patched(
    servers: Servers, api: Api, tenant: TenantHandle, watch: NudgeWatch, sessions: Sessions
) -> None:
    async with worker(servers, "V1"):
        old = [
            await start(api, tenant, f"old-{i}", items=i % 3, wait=True)
            for i in range(WAITING_RUNS)
        ]
        await until(watch, api, tenant, old, status="WAITING", waitingFor="go")
    bought = version_agents.BOUGHT["fetch"]
    async with worker(servers, "PATCHED"):
        new = await start(api, tenant, "new", items=1, wait=True)  # started on the new code
        await until(watch, api, tenant, [new], status="WAITING", waitingFor="go")
        await asyncio.gather(
            *(api.gql(SIGNAL, {"id": run_id}, token=tenant.token) for run_id in [*old, new])
        )
        done = await until(watch, api, tenant, [*old, new], status="SUCCEEDED")
    assert all(r["codeVersion"] == "v1" for r in done[:-1])
    assert done[-1]["codeVersion"] == "patched"
    assert version_agents.BOUGHT["fetch"] == bought + 1  # the new run's `load` only
    failed = await sessions.one(
        text("SELECT count(*) AS n FROM runs WHERE tenant_id = :t AND status <> 'SUCCEEDED'"),
        t=tenant.id,
    )
    assert failed is not None
    assert failed["n"] == 0
    assert ("patched:load", 1, True, "patched") in await journal(sessions, new)
