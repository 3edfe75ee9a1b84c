"""Encryption at rest per tenant (issue 46): a tenant that encrypts has its step results, its
runs' inputs and outputs and its signals' payloads sealed by its own data key (wrapped by
OUTLIVE_ENCRYPTION_KEY) before they are written, inline and as blobs; its agents and its GraphQL
answers get the values back; no table holds the plaintext. A repeated idempotency key is still
told apart from another input under it. A tenant that does not encrypt is stored as before.
Rotation re-wraps the data keys."""

from __future__ import annotations

import base64
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
from outlive.worker import WorkerHost
from outlive.workflows.runs import WorkflowDeps
from tests.conftest import make_settings
from tests.governance.scan import mentions
from tests.schedules.support import ONE, RUNS, clock, rewind
from tests.support import Api, GraphQLError, NudgeWatch, Servers, TenantHandle, settled
from tests.workflows.test_lease import deliver, start

pytestmark = [pytest.mark.timeout(300)]

STEPS = "query($id: ID!) { run(id: $id) { status steps(first: 10) { name result } } }"
RETRY = "mutation($id: ID!) { retryRun(id: $id) { created run { id input } } }"
CANCEL = "mutation($id: ID!) { cancelRun(id: $id) { input } }"
CREATE_SCHEDULE = "mutation($i: ScheduleInput!) { createSchedule(input: $i) { id input } }"
TRIGGER = "mutation($id: ID!) { triggerSchedule(id: $id) { run { input } } }"
PAYLOAD = """query($id: ID!, $ref: String!) {
  payload(runId: $id, ref: $ref) { size base64 } }"""
AGENTS = ["tests.governance.sealed_agents:NOTE", "tests.governance.sealed_agents:ECHO"]
START = """mutation($i: StartRunInput!) {
  startRun(input: $i) { created run { id input } } }"""
SIGNAL = """mutation($i: SignalRunInput!) {
  signalRun(input: $i) { accepted run { input } } }"""
READ = """query($id: ID!) { run(id: $id) {
  id status error input output events(first: 100) { type data }
  children(first: 5) { edges { node { input output } } } } }"""


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


async def note_run(
    api: Api, watch: NudgeWatch, who: TenantHandle, marker: str, **more: Any
) -> dict[str, Any]:
    """A `note` run carrying `marker` in its input, its signal and (through its child) its
    output, read back through GraphQL once it settled."""
    started = await api.gql(
        START, {"i": {"agent": "note", "input": {"note": marker, **more}}}, token=who.token
    )
    run_id = started["startRun"]["run"]["id"]
    assert started["startRun"]["run"]["input"]["note"] == marker  # the answer: opened
    if more.get("wait", True):
        await watch.until(run_id, lambda r: r.status == "WAITING" and r.waiting_for == "reply")
        signal = {"id": run_id, "name": "reply", "payload": {"text": marker}}
        signalled = (await api.gql(SIGNAL, {"i": signal}, token=who.token))["signalRun"]
        assert signalled["accepted"]
        assert signalled["run"]["input"]["note"] == marker
    await watch.until(run_id, settled, timeout=60)
    found: dict[str, Any] = (await api.gql(READ, {"id": run_id}, token=who.token))["run"]
    assert found["status"] == "SUCCEEDED", found["error"]
    return found


async def test_a_tenant_that_encrypts_has_its_inputs_outputs_and_signals_sealed(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    key = sealing.new_deployment_key()
    settings = make_settings(
        servers, encryption_key=key, agent_modules=AGENTS, blob_threshold_bytes=1024
    )
    assert await sealing.enable(sessions, sealing.deployment_key(key), tenant.principal.tenant.slug)
    secret, plain = f"secret-{uuid.uuid4().hex}", f"plain-{uuid.uuid4().hex}"
    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        async with (
            Api.running(settings) as api,
            NudgeWatch(settings.redis_url or "", sessions, tenant.id) as mine,
            NudgeWatch(settings.redis_url or "", sessions, other_tenant.id) as theirs,
        ):
            sealed = await note_run(api, mine, tenant, secret)
            large = await note_run(api, mine, tenant, secret, wait=False, repeat=100)
            ref = {"id": large["id"], "ref": large["output"]["$blob"]}
            ranged = (await api.gql(PAYLOAD, ref, token=tenant.token))["payload"]
            stored = await note_run(api, theirs, other_tenant, plain)
            retried = (await api.gql(RETRY, {"id": sealed["id"]}, token=tenant.token))["retryRun"]
            cancelled = await api.gql(CANCEL, {"id": retried["run"]["id"]}, token=tenant.token)
    finally:
        await host.stop()

    # What the client gave and the agents returned comes back unchanged through GraphQL.
    for found, marker in ((sealed, secret), (stored, plain)):
        assert found["input"] == {"note": marker, "wait": True, "repeat": 1}
        assert found["output"] == {
            "note": marker,
            "reply": {"text": marker},  # the agent got the signal's payload as it was sent
            "child": {"echo": marker},  # the child got its input, the parent its output
        }
        (signal,) = [e["data"] for e in found["events"] if e["type"] == "signal"]
        assert signal["payload"] == {"text": marker}
        (child,) = [edge["node"] for edge in found["children"]["edges"]]
        assert (child["input"]["note"], child["output"]) == (marker, {"echo": marker})
    assert retried["created"]  # its input opened to be validated, and sealed again
    assert retried["run"]["input"] == cancelled["cancelRun"]["input"] == sealed["input"]
    assert set(large["output"]) == {"$blob", "size"}  # over the threshold: stored apart
    assert json.loads(base64.b64decode(ranged["base64"])) == {  # read in ranges: the value
        "note": " ".join([secret] * 100),
        "reply": None,
        "child": {"echo": secret},
    }
    assert ranged["size"] == len(base64.b64decode(ranged["base64"]))

    # No table holds the encrypting tenant's marker; the other tenant's is stored as before.
    found_secret = await mentions(sessions, secret)
    assert found_secret == {}, f"the plaintext is stored in {found_secret}"
    assert set(await mentions(sessions, plain)) >= {
        "runs",
        "run_signals",
        "run_waits",
        "run_events",
        "schedules",
    }
    row = await sessions.one(  # and the sealed tenant's row holds `{"$enc": ...}` values
        text(
            "SELECT r.input::text AS i, r.output::text AS o, s.payload::text AS p FROM runs r"
            " JOIN run_signals s ON s.run_id = r.id WHERE r.id = :id"
        ),
        id=uuid.UUID(sealed["id"]),
    )
    assert row is not None
    assert [sealing.is_sealed(row[c]) for c in ("i", "o", "p")] == [True, True, True]

    recorded = await read_recorded(  # `outlive replay` opens them with the deployment key
        sessions,
        Filters(tenant=tenant.principal.tenant.slug, agent="note", statuses=["SUCCEEDED"]),
        kek=sealing.deployment_key(key),
    )
    (replayed,) = [r for r in recorded if str(r.run.id) == sealed["id"]]
    assert replayed.run.input == sealed["input"]
    assert [w.payload for w in replayed.waits.values()] == [{"text": secret}]
    assert [c.output for c in replayed.children.values()] == [{"echo": secret}]


async def test_a_repeated_idempotency_key_is_told_apart_when_the_input_is_sealed(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    key = sealing.new_deployment_key()
    settings = make_settings(servers, encryption_key=key, agent_modules=AGENTS)
    assert await sealing.enable(sessions, sealing.deployment_key(key), tenant.principal.tenant.slug)
    marker = f"secret-{uuid.uuid4().hex}"
    request = {"agent": "note", "idempotencyKey": uuid.uuid4().hex, "input": {"note": marker}}
    async with Api.running(settings) as api:
        first = (await api.gql(START, {"i": request}, token=tenant.token))["startRun"]
        again = (await api.gql(START, {"i": request}, token=tenant.token))["startRun"]
        other = {**request, "input": {"note": f"{marker}-other"}}
        with pytest.raises(GraphQLError) as refused:
            await api.gql(START, {"i": other}, token=tenant.token)
    assert first["created"] is True
    assert (again["created"], again["run"]["id"]) == (False, first["run"]["id"])
    assert again["run"]["input"]["note"] == marker
    assert refused.value.codes == ["IDEMPOTENCY_CONFLICT"]
    assert await mentions(sessions, marker) == {}


async def test_a_signalled_or_debounced_start_of_a_tenant_that_encrypts_is_sealed(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    key = sealing.new_deployment_key()
    settings = make_settings(servers, encryption_key=key, agent_modules=AGENTS)
    assert await sealing.enable(sessions, sealing.deployment_key(key), tenant.principal.tenant.slug)
    marker = f"secret-{uuid.uuid4().hex}"

    def start(note: str, **options: Any) -> dict[str, Any]:
        return {"agent": "note", "input": {"note": note}, **options}

    async with Api.running(settings) as api:  # no worker: the runs stay QUEUED
        line = {"key": uuid.uuid4().hex}
        first = await api.gql(START, {"i": start("first", **line)}, token=tenant.token)
        signalled = start(f"{marker}-signal", onConflict="SIGNAL_EXISTING", **line)
        met = (await api.gql(START, {"i": signalled}, token=tenant.token))["startRun"]
        held = {"key": uuid.uuid4().hex, "debounce": {"seconds": 600}}
        await api.gql(START, {"i": start("before", **held)}, token=tenant.token)
        later = start(f"{marker}-debounced", **held)
        debounced = (await api.gql(START, {"i": later}, token=tenant.token))["startRun"]
        events = await api.gql(READ, {"id": met["run"]["id"]}, token=tenant.token)
    assert (met["created"], met["run"]["id"]) == (False, first["startRun"]["run"]["id"])
    (signal,) = [e["data"] for e in events["run"]["events"] if e["type"] == "signal"]
    assert (signal["name"], signal["payload"]["note"]) == ("input", f"{marker}-signal")
    assert not debounced["created"]  # the held-back run took the later input
    assert debounced["run"]["input"]["note"] == f"{marker}-debounced"
    assert await mentions(sessions, marker) == {}


async def test_a_schedule_of_a_tenant_that_encrypts_keeps_its_input_and_its_runs_sealed(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    key = sealing.new_deployment_key()
    settings = make_settings(servers, encryption_key=key, agent_modules=AGENTS)
    assert await sealing.enable(sessions, sealing.deployment_key(key), tenant.principal.tenant.slug)
    marker = f"secret-{uuid.uuid4().hex}"
    given = {"note": marker, "wait": True, "repeat": 1}
    spec = {
        "agent": "note",
        "cron": "* * * * *",
        "onConflict": "ENQUEUE",
        "input": {"note": marker},
    }
    async with Api.running(settings) as api, clock(settings) as fire:  # no worker: runs queue
        made = (await api.gql(CREATE_SCHEDULE, {"i": spec}, token=tenant.token))["createSchedule"]
        triggered = await api.gql(TRIGGER, {"id": made["id"]}, token=tenant.token)
        await rewind(
            sessions, made["id"], 0
        )  # this minute's occurrence is due: the clock starts it
        assert await fire(sessions) >= 1
        runs = (await api.gql(RUNS, {"s": made["id"]}, token=tenant.token))["runs"]
        again = (await api.gql(ONE, {"id": made["id"]}, token=tenant.token))["schedule"]
    assert made["input"] == again["input"] == given
    assert triggered["triggerSchedule"]["run"]["input"] == given
    inputs = [edge["node"]["input"] for edge in runs["edges"]]
    assert len(inputs) >= 2  # the one triggered, and the clock's
    assert all(i == given for i in inputs)
    assert await mentions(sessions, marker) == {}
