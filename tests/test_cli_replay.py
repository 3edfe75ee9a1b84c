"""`outlive replay` as a deploy gate (contract §1, issue 43): exit 0 when no recorded run
diverges from the installed code, 1 when one does, 2 (one line) on bad input; `--json` for
tools. The runs are recorded by an in-process worker; the command runs as a process with the
edit under test installed through `OUTLIVE_AGENT_MODULES`."""

from __future__ import annotations

import json

import pytest

from outlive.db.tx import Sessions
from tests.support import Api, NudgeWatch, Servers, TenantHandle, service_env
from tests.test_cli import _one_line_error, outlive
from tests.workflows.test_versions import deployed, start, until, worker

pytestmark = [pytest.mark.timeout(300)]


async def test_replay_gates_a_deploy_by_its_exit_status(
    servers: Servers, tenant: TenantHandle, sessions: Sessions
) -> None:
    async with (
        Api.running(deployed(servers, "V1")) as api,
        NudgeWatch(servers.redis_url, sessions, tenant.id) as watch,
        worker(servers, "V1"),
    ):
        runs = [await start(api, tenant, f"k{i}", items=i, wait=i == 1) for i in range(3)]
        await until(watch, api, tenant, runs[:1], status="SUCCEEDED")
        await until(watch, api, tenant, runs[1:2], status="WAITING", waitingFor="go")
        await until(watch, api, tenant, runs[2:], status="SUCCEEDED")
    slug = tenant.principal.tenant.slug
    env = service_env(deployed(servers, "V1"), OUTLIVE_AGENT_MODULES="tests.version_agents:V1")

    same = outlive("replay", "--tenant", slug, env=env)
    assert same.returncode == 0, same.stderr
    lines = same.stdout.splitlines()
    assert len(lines) == 4
    assert all(line.endswith("compatible") for line in lines[:3])
    assert lines[-1].startswith("compatible 3, patched 0, diverged 0, output invalid 0 (3 run(s)")

    renamed = {**env, "OUTLIVE_AGENT_MODULES": "tests.version_agents:RENAMED"}
    broken = outlive("replay", "--tenant", slug, "--json", env=renamed)
    assert broken.returncode == 1, broken.stderr
    rows = [json.loads(line) for line in broken.stdout.splitlines()]
    assert {r["runId"] for r in rows[:-1]} == set(runs)
    assert all(r["verdict"].startswith("diverged at load #1") for r in rows[:-1])
    assert rows[-1]["summary"]["diverged"] == 3

    gate = outlive("replay", "--tenant", slug, "--status", "WAITING", env=renamed)
    assert gate.returncode == 1  # the waiting run diverges: this deploy would hold it
    assert gate.stdout.splitlines()[0].startswith(runs[1])
    patched = {**env, "OUTLIVE_AGENT_MODULES": "tests.version_agents:PATCHED"}
    fixed = outlive("replay", "--tenant", slug, "--status", "waiting", env=patched)
    assert fixed.returncode == 0, fixed.stdout
    assert fixed.stdout.splitlines()[0].endswith("patched (load)")

    for bad in (["--status", "NOPE"], ["--since", "soon"]):
        done = outlive("replay", *bad, env=env)
        assert done.returncode == 2
        _one_line_error(done)
    unknown = outlive("replay", "--tenant", "no-such-tenant", env=env)
    assert unknown.returncode == 2
    assert "no tenant" in _one_line_error(unknown)
