"""`eraseSubject` through GraphQL (contract §7 "Retention and erasure", issue 46): a run of the
tag that is active is cancelled first; every run of the tenant carrying the tag is deleted with
its input, output, steps, events, signals, stream chunks and webhook deliveries; usage totals are
kept; the receipt counts what was deleted and a second call counts 0; another tenant's runs
with the same tag, and the tenant's other runs, are untouched; the call is recorded without
the erased content; nothing of the subject is left in any table or in Redis."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.realtime.outputs import keys_of
from tests.governance.scan import mentions
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle, settled

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("worker")]

START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id status } } }"
SIGNAL = "mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted } }"
ERASE = """mutation($tag: String!) { eraseSubject(tag: $tag) {
    tag runs steps events signals deliveries at } }"""
RUN = "query($id: ID!) { run(id: $id) { id status output } }"
USAGE = """{ usage(days: 2) { day agent status count }
             usageTokens(days: 2) { day agent inputTokens outputTokens } }"""
USAGE_PER_TURN = {"inputTokens": 100, "outputTokens": 10}


async def start(api: Api, who: TenantHandle, tags: list[str], **input: Any) -> str:
    options = {
        "agent": "demo",
        "key": uuid.uuid4().hex,  # each its own line: none waits for another
        "tags": tags,
        "input": {"delayMs": 0, "usagePerTurn": USAGE_PER_TURN, **input},
    }
    found = await api.gql(START, {"i": options}, token=who.token)
    return str(found["startRun"]["run"]["id"])


async def read(api: Api, who: TenantHandle, run_id: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (await api.gql(RUN, {"id": run_id}, token=who.token))["run"]
    return found


def totals(usage: dict[str, Any]) -> tuple[int, int, int]:
    runs = sum(u["count"] for u in usage["usage"])
    tokens = usage["usageTokens"]
    return runs, sum(u["inputTokens"] for u in tokens), sum(u["outputTokens"] for u in tokens)


@pytest.fixture
async def watch(settings: Settings, sessions: Sessions, tenant: TenantHandle) -> Any:
    async with NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watching:
        yield watching


async def test_erase_subject_deletes_everything_of_the_tag_and_keeps_usage(
    api: Api,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    sessions: Sessions,
    settings: Settings,
    watch: NudgeWatch,
) -> None:
    marker = f"subject-{uuid.uuid4().hex}"  # in their signals, outputs and timelines only
    subject = f"user:{uuid.uuid4().hex[:12]}"
    # A run of the subject that finished (a signal carrying the marker is in its output), one
    # still WAITING for a signal (active: cancelled first), one that streamed, and runs that
    # must stay: the tenant's other runs and another tenant's run with the same tag.
    hook = 'mutation { createWebhookEndpoint(url: "http://127.0.0.1:9/hook") { endpoint { id } } }'
    await api.gql(hook, token=tenant.token)  # each settled run gets a delivery (never answered)
    done = await start(api, tenant, [subject], turns=2, awaitSignal=f"{marker}-name")
    waiting = await start(api, tenant, [subject, "vip"], turns=1, awaitSignal=f"{marker}-w")
    streamed = await start(api, tenant, [subject], turns=1, streamChars=40)
    kept = await start(api, tenant, ["someone-else"], turns=1)
    theirs = await start(api, other_tenant, [subject], turns=1)
    await watch.until(done, lambda r: r.status == "WAITING")
    signal = {"id": done, "name": f"{marker}-name", "payload": {"note": marker}}
    assert (await api.gql(SIGNAL, {"i": signal}, token=tenant.token))["signalRun"]["accepted"]
    await watch.until(waiting, lambda r: r.status == "WAITING")
    for run_id in (done, streamed, kept):
        await watch.until(run_id, settled)
    running = await start(api, tenant, [subject], turns=200, delayMs=100)  # active: cancelled
    await watch.until(running, lambda r: r.status == "RUNNING" and r.step_seq > 0)
    assert marker in str((await read(api, tenant, done) or {})["output"])
    redis = Redis.from_url(settings.redis_url or "")
    assert await redis.exists(*keys_of(streamed)) > 0  # its stream's chunks are kept for minutes
    before = totals(await api.gql(USAGE, token=tenant.token))
    assert before[1] > 0
    assert await mentions(sessions, marker)  # the scan finds the marker before

    receipt = (await api.gql(ERASE, {"tag": subject}, token=tenant.token))["eraseSubject"]

    assert receipt["tag"] == subject
    assert receipt["runs"] == 4
    assert receipt["steps"] >= 5  # 2 + 1 + 1 turns, and the running one's
    assert receipt["signals"] == 1
    assert receipt["events"] > 4 * 4
    assert receipt["deliveries"] == 4  # run.succeeded x2, run.cancelled x2
    assert receipt["at"] is not None
    for run_id in (done, waiting, streamed, running):
        assert await read(api, tenant, run_id) is None
    assert await read(api, tenant, kept) is not None
    assert await read(api, other_tenant, theirs) is not None  # the same tag, another tenant
    assert await mentions(sessions, marker) == {}  # nothing of the subject, in any table
    assert await redis.exists(*keys_of(streamed)) == 0
    await redis.aclose()
    # Usage totals are kept: every run still counts, and every step any of them recorded (the
    # running run recorded more after `before` was read, until its cancel stopped it).
    recorded_steps = receipt["steps"] + 1  # and the kept run's one turn
    assert totals(await api.gql(USAGE, token=tenant.token)) == (
        before[0],
        USAGE_PER_TURN["inputTokens"] * recorded_steps,
        USAGE_PER_TURN["outputTokens"] * recorded_steps,
    )

    again = (await api.gql(ERASE, {"tag": subject}, token=tenant.token))["eraseSubject"]
    assert [again[k] for k in ("runs", "steps", "events", "signals", "deliveries")] == [0] * 5
    async with sessions.unit() as uow:
        recorded = await uow.all(
            text(
                "SELECT tag, by, runs, steps, signals FROM erasures"
                " WHERE tenant_id = :t ORDER BY at"
            ),
            t=tenant.id,
        )
    assert [dict(r) for r in recorded] == [
        {"tag": subject, "by": tenant.principal.user.email, "runs": 4,
         "steps": receipt["steps"], "signals": 1},
        {"tag": subject, "by": tenant.principal.user.email, "runs": 0, "steps": 0, "signals": 0},
    ]  # fmt: skip


async def test_erase_subject_refuses_a_tag_that_is_not_one(api: Api, tenant: TenantHandle) -> None:
    with pytest.raises(GraphQLError) as refused:
        await api.gql(ERASE, {"tag": "no spaces allowed"}, token=tenant.token)
    assert refused.value.codes == ["BAD_USER_INPUT"]
