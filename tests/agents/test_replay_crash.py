"""A pydantic-ai agent replays exactly across SIGKILLed workers (issue 40), against a scripted
OpenAI-compatible stub on loopback (`script_stub`), with real `outlive worker` processes:

- with a worker killed after each outcome of a tool call (returned, `ModelRetry`, a
  `ValidationError`, deferred), the model is sent, byte for byte, the requests of an undisturbed
  run, and each tool body ran once (a ledger the tools write, outside the killed processes);
- an event handler sees each event exactly once across 3 kills and 2 approvals;
- a `runOutput` reader of a reply cut by a kill gets a `reset` before the new attempt's text.

Each scenario runs once undisturbed, then once with the kills; the stub counts what each sent.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services import runs as runs_service
from tests.agents.script_stub import Calls, Says, ScriptStub, calls
from tests.conftest import make_settings
from tests.realtime.clients import Socket, serve
from tests.realtime.test_outputs import next_chunk, read_all
from tests.support import (
    Api,
    NudgeWatch,
    Servers,
    TenantHandle,
    WorkerProcesses,
    loopback_server,
    settled,
)

pytestmark = pytest.mark.timeout(300)
AGENT = "tests.replay_agents:AGENT"
ROOT = str(Path(__file__).resolve().parents[2])
SIGNAL = "mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted } }"
USAGE = "query($id: ID!) { run(id: $id) { usage { requests abandonedRequests } } }"
OUTPUT = """subscription($id: ID!) {
  runOutput(id: $id) { stream cursor text done kind attempt reset } }"""


@pytest.fixture
async def stub() -> AsyncIterator[tuple[ScriptStub, str]]:
    served = ScriptStub([])
    async with loopback_server(served.app) as url:
        yield served, url
        served.release_all()


@pytest.fixture
def settings(servers: Servers, stub: tuple[ScriptStub, str]) -> Settings:
    return make_settings(servers, agent_modules=[AGENT], llm_base_url=stub[1] + "/v1")


@pytest.fixture
def workers(
    settings: Settings, stub: tuple[ScriptStub, str], tmp_path: Path
) -> Iterator[WorkerProcesses]:
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    with WorkerProcesses.of(
        settings,
        tmp_path,
        OUTLIVE_AGENT_MODULES=AGENT,
        OUTLIVE_LLM_BASE_URL=stub[1] + "/v1",
        OUTLIVE_LLM_API_KEY="sk-stub",
        REPLAY_LEDGER=str(tmp_path / "ledger"),
        REPLAY_EVENTS=str(tmp_path / "events"),
        PYTHONPATH=path,
    ) as processes:
        yield processes


@dataclass
class Conversation:
    """One run of the `replay` agent, its worker killed at the moments a test asks for."""

    api: Api
    tenant: TenantHandle
    watch: NudgeWatch
    stub: ScriptStub
    workers: WorkerProcesses
    files: Path
    worker: Any = None
    run_id: str = ""
    kills: int = 0
    seen: dict[str, list[str]] = field(default_factory=dict)

    async def start(self) -> None:
        for name in ("ledger", "events"):
            (self.files / name).write_text("")
        self.stub.clear()
        self.worker = self.workers.start()
        started = await self.api.start_run(self.tenant.token, "replay", {"message": "go"})
        self.run_id = started["run"]["id"]

    async def kill(self) -> None:
        await self.workers.kill(self.worker)
        self.kills += 1
        self.worker = self.workers.start()

    async def kill_at(self, k: int, arrived: asyncio.Event) -> None:
        """Kill the worker when request k of the conversation reached the model."""
        await asyncio.wait_for(arrived.wait(), 60)
        await self.kill()
        self.stub.release(k)

    async def waiting(self) -> runs_service.RunRecord:
        return await self.watch.until(self.run_id, lambda r: r.status == "WAITING", timeout=90)

    async def signal(self, name: str, wait_id: str, payload: dict[str, Any]) -> None:
        answer = {"id": self.run_id, "name": name, "payload": payload, "waitId": wait_id}
        data = await self.api.gql(SIGNAL, {"i": answer}, token=self.tenant.token)
        assert data["signalRun"]["accepted"] is True

    async def end(self) -> runs_service.RunRecord:
        run = await self.watch.until(self.run_id, settled, timeout=90)
        await self.workers.kill(self.worker)
        for name in ("ledger", "events"):
            self.seen[name] = (self.files / name).read_text().splitlines()
        return run

    async def usage(self) -> dict[str, int]:
        data = await self.api.gql(USAGE, {"id": self.run_id}, token=self.tenant.token)
        found: dict[str, int] = data["run"]["usage"]
        return found


@pytest.fixture
async def conversation(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[ScriptStub, str],
    workers: WorkerProcesses,
    tmp_path: Path,
) -> AsyncIterator[Conversation]:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        yield Conversation(api, tenant, watch, stub[0], workers, tmp_path)


OUTCOMES: list[Calls | Says] = [
    calls(("note", "c1", {"n": 1})),  # returns
    calls(("flaky", "c2", {"n": 1})),  # ModelRetry
    calls(("flaky", "c3", {"n": 1})),
    calls(("strict", "c4", {"n": 1})),  # ValidationError
    calls(("strict", "c5", {"n": 1})),
    calls(("external", "c6", {"n": 1})),  # deferred, answered by a signal
    Says("all done"),
]


async def _outcomes(talk: Conversation, *, kills: bool) -> tuple[dict[int, list[bytes]], Any]:
    await talk.start()
    for k in (2, 3, 5) if kills else ():  # after the return, the ModelRetry, the error
        await talk.kill_at(k, talk.stub.hold(k))
    await talk.waiting()  # external(1): deferred
    held = talk.stub.hold(7) if kills else None
    await talk.signal("tool_result", "call-c6", {"result": 8})
    if held is not None:  # after the deferred call's answer
        await talk.kill_at(7, held)
    run = await talk.end()
    return {k: list(v) for k, v in talk.stub.bodies.items()}, run


async def test_a_worker_killed_after_each_tool_outcome_sends_the_model_the_same_history(
    conversation: Conversation,
) -> None:
    talk = conversation
    talk.stub.turns = OUTCOMES
    calm_bodies, calm = await _outcomes(talk, kills=False)
    calm_ledger, calm_usage = talk.seen["ledger"], await talk.usage()
    bodies, run = await _outcomes(talk, kills=True)
    usage = await talk.usage()

    assert calm.status == run.status == "SUCCEEDED", run.error
    assert talk.kills == 4
    for k, sent in bodies.items():  # byte for byte, every request, the re-asked ones too
        assert all(body == calm_bodies[k][0] for body in sent), f"request {k} differs"
    assert [len(bodies[k]) for k in sorted(bodies)] == [1, 2, 2, 1, 2, 1, 2]
    assert Counter(talk.seen["ledger"]) == Counter(calm_ledger)  # each tool body ran once
    assert Counter(calm_ledger) == {"note 1": 1, "flaky 1": 2, "strict 1": 2, "external 1": 1}
    assert calm_usage == {"requests": 7, "abandonedRequests": 0}
    assert usage == {"requests": 7, "abandonedRequests": 4}  # the 4 cut by a kill


EVENTS: list[Calls | Says] = [
    calls(("note", "c1", {"n": 1})),
    calls(("refund", "c2", {"order_id": "A-1", "amount": 42.0})),
    calls(("note", "c3", {"n": 2})),
    calls(("refund", "c4", {"order_id": "A-2", "amount": 5.0})),
    Says("all done"),
]


async def _approvals(talk: Conversation, *, kills: bool) -> Any:
    await talk.start()
    if kills:
        await talk.kill_at(2, talk.stub.hold(2))  # 1: while the model is asked
    await talk.waiting()
    if kills:
        await talk.kill()  # 2: while WAITING for the first approval
    held = talk.stub.hold(4) if kills else None
    await talk.signal("approval", "call-c2", {"approved": True})
    if held is not None:
        await talk.kill_at(4, held)  # 3: after the approved refund
    await talk.waiting()
    await talk.signal("approval", "call-c4", {"approved": True})
    return await talk.end()


async def test_an_event_handler_sees_each_event_once_across_three_kills_and_two_approvals(
    conversation: Conversation,
) -> None:
    talk = conversation
    talk.stub.turns = EVENTS
    calm = await _approvals(talk, kills=False)
    calm_events, calm_ledger = talk.seen["events"], talk.seen["ledger"]
    run = await _approvals(talk, kills=True)

    assert calm.status == run.status == "SUCCEEDED", run.error
    assert talk.kills == 3
    assert talk.seen["events"] == calm_events  # each event once, in the same order
    assert Counter(calm_events)["function_tool_result:c3"] == 1
    assert Counter(calm_events)["part_start:"] == 5  # one per model response
    assert talk.seen["ledger"] == calm_ledger == ["note 1", "refund A-1 42.00", "note 2",
                                                   "refund A-2 5.00"]  # fmt: skip


async def test_a_run_output_reader_gets_a_reset_before_the_new_attempts_text(
    conversation: Conversation, settings: Settings
) -> None:
    talk = conversation
    reply = "The refund of 42.00 for order A-1 is done and confirmed for you today"
    talk.stub.turns = [Says(reply)]
    talk.stub.gap_s = 0.02
    arrived = talk.stub.hold(1, after_words=5)  # five words out, then the worker dies
    async with serve(settings) as served, Socket.open(served.url, token=talk.tenant.token) as sock:
        await talk.start()
        await sock.send(
            {
                "type": "subscribe",
                "id": "out",
                "payload": {"query": OUTPUT, "variables": {"id": talk.run_id}},
            }
        )
        await asyncio.wait_for(arrived.wait(), 60)
        early = []
        while "".join(c["text"] for c in early) != "The refund of 42.00 for ":
            chunk = await next_chunk(sock)  # the dead attempt's words reached the reader
            assert chunk is not None
            early.append(chunk)
        await talk.kill_at(1, arrived)
        chunks = [c for c in [*early, *await read_all(sock)] if c["kind"] == "text"]
        run = await talk.end()

    first = [c for c in chunks if c["attempt"] == 1]
    reset = [i for i, c in enumerate(chunks) if c["reset"]]
    shown = ""  # what a UI that drops a stream's text at a reset shows (web: applyChunk)
    for chunk in chunks:
        shown = "" if chunk["reset"] else shown + chunk["text"]
    assert run.status == "SUCCEEDED"
    assert "".join(c["text"] for c in first) == "The refund of 42.00 for "  # the dead attempt's
    assert len(reset) == 1
    assert all(c["attempt"] == 1 for c in chunks[: reset[0]])
    assert all(c["attempt"] > 1 for c in chunks[reset[0] :])  # the reset comes first
    assert shown == reply  # once, never the dead attempt's words before it


ROLLING: list[Calls | Says] = [
    calls(("note", "c1", {"n": 1})),
    calls(("note", "c2", {"n": 2})),
    Says("all done"),
]
START = """mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"""
RUNS = """query($key: String!) { runs(key: $key, first: 5) { edges { node {
  status usage { requests abandonedRequests } events(first: 200) { type } } } } }"""


async def test_a_rolling_sigterm_of_two_workers_during_20_conversations_buys_no_reply_twice(
    conversation: Conversation,
) -> None:
    """Issue 40 (round five, F8): each worker in turn is stopped as a deploy stops it (SIGTERM)
    and replaced while 20 conversations of 3 model requests each run on both: the model is asked
    exactly 60 times, the minimal count."""
    talk = conversation
    talk.stub.turns = ROLLING
    talk.stub.delay_s = 0.8  # every reply is in flight for a while: a stop catches some
    talk.workers.concurrency = 4
    for name in ("ledger", "events"):
        (talk.files / name).write_text("")
    old = [talk.workers.start(), talk.workers.start()]
    for i in range(20):
        given = {"agent": "replay", "input": {"message": "go"}, "key": f"conversation-{i}"}
        await talk.api.gql(START, {"i": given}, token=talk.tenant.token)
    for n, worker in enumerate(old):  # one after the other, as a rolling deploy does
        while talk.stub.requests < 12 * (n + 1):  # mid-way through the conversations
            await talk.watch.next_nudge(timeout=1.0)
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 60)
        assert code == 0, f"worker {n} exited {code}"
        talk.workers.start()
    found = []
    for i in range(20):
        run = await talk.watch.until_true(
            lambda i=i: _settled_run(talk, f"conversation-{i}"), 120, f"conversation {i}"
        )
        found.append(run)

    assert [r["status"] for r in found] == ["SUCCEEDED"] * 20
    usages = [(r["usage"], [e["type"] for e in r["events"]]) for r in found]
    assert talk.stub.requests == 60, usages  # 20 conversations x 3 replies: none bought twice
    assert all(r["usage"] == {"requests": 3, "abandonedRequests": 0} for r in found)
    released = sum(1 for r in found for e in r["events"] if e["type"] == "released")
    assert released >= 2  # the stops did catch conversations in flight, and handed them back


async def _settled_run(talk: Conversation, key: str) -> dict[str, Any] | None:
    data = await talk.api.gql(RUNS, {"key": key}, token=talk.tenant.token)
    runs = [e["node"] for e in data["runs"]["edges"]]
    return runs[0] if runs and runs[0]["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None
