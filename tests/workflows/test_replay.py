"""`outlive replay` against a corpus of recorded runs (issue 43): runs of `demo`, `llm` (against
the stub model) and `pipeline` (`tests.version_agents`), recorded by a real worker, replayed
in-process under six labelled code edits of `pipeline`: every run gets its label, the stub model
gets no request and the network guard refuses nothing. And the guard: code that tries the
network outside a step is refused, and its run diverges. Sized for CI; the issue's corpus:
OUTLIVE_REPLAY_CORPUS_RUNS=500."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from outlive.services.runs.recorded import Filters
from outlive.worker import WorkerHost
from outlive.workflows.replay import Verdict
from tests.agents.stub_model import StubModel, serve
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle

pytestmark = [pytest.mark.timeout(600)]

CORPUS = int(os.environ.get("OUTLIVE_REPLAY_CORPUS_RUNS", "60"))
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
STATUS = "query($id: ID!) { run(id: $id) { status waitingFor } }"


def run_input(i: int) -> tuple[str, dict[str, Any], str]:
    """The i-th run of the corpus: its agent, its input, and the status it is recorded in."""
    waits = (i // 3) % 2 == 1
    if i % 3 == 0:
        signal = {"awaitSignal": "go"} if waits else {}
        return "demo", {"turns": 1 + i % 4, "delayMs": 0, **signal}, waits
    if i % 3 == 1:
        return "llm", {"prompt": f"question {i}", "stream": i % 2 == 0}, False
    return "pipeline", {"items": i % 4, "wait": waits}, waits


def label(agent: str, params: dict[str, Any], edit: str) -> str:
    """What replay must say of a run under `edit` (`tests.version_agents`)."""
    if agent != "pipeline" or edit in ("V1", "REORDERED"):
        return "compatible"
    ahead_of_wait = params["items"] > 0  # steps recorded after `plan`, before the wait
    if edit == "ADDED":
        if params["wait"] and not ahead_of_wait:
            return "compatible"  # the run never got past where `check` goes
        nxt = "item #1" if params["items"] else "write #1"
        return (
            "diverged at check #1: not in the journal, where recorded steps remain"
            f" (next recorded: {nxt})"
        )
    if edit == "DELETED":
        return "diverged at plan #1: recorded, but the code no longer reaches it"
    if edit == "RENAMED":
        return (
            "diverged at load #1: not in the journal, where recorded steps remain"
            " (next recorded: fetch #1)"
        )
    if edit == "RETYPED":
        return "output invalid: fetch #1"
    assert edit == "PATCHED"
    return "patched (load)"


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubModel, str]]:
    model = StubModel(turns=2)
    async with serve(model) as url:
        yield model, url


@pytest.fixture
async def corpus(
    servers: Servers, tenant: TenantHandle, sessions: Any, stub: tuple[StubModel, str]
) -> list[tuple[str, str, dict[str, Any]]]:
    """The recorded runs: (id, agent, input), each settled or WAITING where it was meant to."""
    settings = make_settings(
        servers, agent_modules=["tests.version_agents:V1"], llm_base_url=stub[1]
    )
    runs: list[tuple[str, str, dict[str, Any]]] = []
    host = WorkerHost(settings, concurrency=16)
    await host.start()
    try:
        async with (
            Api.running(settings) as api,
            NudgeWatch(servers.redis_url, sessions, tenant.id) as watch,
        ):
            for i in range(CORPUS):
                agent, params, _ = run_input(i)
                options = {"agent": agent, "key": f"k{i}", "input": params}
                data = await api.gql(START, {"i": options}, token=tenant.token)
                runs.append((data["startRun"]["run"]["id"], agent, params))

            async def recorded() -> bool | None:
                for i, (run_id, _, _) in enumerate(runs):
                    found = (await api.gql(STATUS, {"id": run_id}, token=tenant.token))["run"]
                    want = "WAITING" if run_input(i)[2] else "SUCCEEDED"
                    if found["status"] != want or (
                        want == "WAITING" and found["waitingFor"] is None
                    ):
                        return None
                return True

            await watch.until_true(recorded, 300, f"{CORPUS} recorded runs")
    finally:
        await host.stop()
    return runs


async def replay_under(
    servers: Servers, tenant: TenantHandle, edit: str, agent: str | None = None
) -> tuple[list[Verdict], int]:
    from outlive.cli.replay import replay

    settings = make_settings(servers, agent_modules=[f"tests.version_agents:{edit}"])
    slug = tenant.principal.tenant.slug
    return await replay(settings, Filters(tenant=slug, agent=agent, limit=CORPUS))


EDITS = ("V1", "ADDED", "DELETED", "RENAMED", "REORDERED", "RETYPED", "PATCHED")


async def test_replay_classifies_every_recorded_run_as_labelled_offline(
    servers: Servers,
    tenant: TenantHandle,
    corpus: list[tuple[str, str, dict[str, Any]]],
    stub: tuple[StubModel, str],
) -> None:
    requests = len(stub[0].requests)
    wrong = []
    for edit in EDITS:
        verdicts, refused = await replay_under(servers, tenant, edit)
        got = {v.run_id: v.verdict for v in verdicts}
        assert len(got) == len(corpus)
        for run_id, agent, params in corpus:
            want = label(agent, params, edit)
            if not got[run_id].startswith(want):
                wrong.append((edit, agent, params, want, got[run_id]))
        assert refused == 0  # no network call was even tried
        llm = [v for v in verdicts if v.agent == "llm"]
        assert llm
        assert all(v.answered == v.recorded >= 1 for v in llm)  # the journal answered the model
    assert wrong == []
    assert len(stub[0].requests) == requests  # no model call

    # The guard: code that tries the network outside a step is refused; its run diverges.
    hits: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hits.append("connected")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    os.environ["OUTLIVE_TEST_LEAK_URL"] = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    try:
        verdicts, refused = await replay_under(servers, tenant, "LEAKY", agent="pipeline")
    finally:
        del os.environ["OUTLIVE_TEST_LEAK_URL"]
        server.close()
        await server.wait_closed()
    assert verdicts
    leaked = "diverged at network #0: the code tried the network outside a step (connect to"
    assert all(v.verdict.startswith(leaked) for v in verdicts), verdicts[0].verdict
    assert refused == len(verdicts)
    assert hits == []  # nothing reached the server
