"""Durable sleeps, waits and signals through the API and a worker (contract §4.1, §7).

Each test fails on the code before WAITING: there was no `signalRun`, no `pauseMs` or
`awaitSignal`, and a sleep held its worker slot for its whole length.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services import runs as runs_service
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle, settled

SIGNAL = """mutation($i: SignalRunInput!) {
  signalRun(input: $i) { accepted run { id status waitingFor wakeAt } } }"""
READ = "query($id: ID!) { run(id: $id) { status waitingFor wakeAt attempt output } }"


async def signal(
    api: Api, token: str, run_id: str, name: str, payload: Any = None, key: str | None = None
) -> dict[str, Any]:
    data = await api.gql(
        SIGNAL,
        {"i": {"id": run_id, "name": name, "payload": payload, "idempotencyKey": key}},
        token=token,
    )
    result: dict[str, Any] = data["signalRun"]
    return result


@pytest.fixture
async def watch(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> AsyncIterator[NudgeWatch]:
    """The tenant's nudges, read as the tests wait for their runs to move."""
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as listening:
        yield listening


async def demo(api: Api, tenant: TenantHandle, **input: Any) -> str:
    """Start a `demo` run of one turn with no delay, `input` on top; its id."""
    started = await api.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0, **input})
    return str(started["run"]["id"])


def waiting(run: runs_service.RunRecord) -> bool:
    return run.status == RunStatus.WAITING


async def events_of(sessions: Sessions, run_id: str) -> list[runs_service.EventRecord]:
    return await runs_service.list_events(sessions, RunId(UUID(run_id)), first=1000)


def types(events: list[runs_service.EventRecord]) -> list[str]:
    return [e.type for e in events]


@pytest.mark.usefixtures("worker")
async def test_a_signal_sent_during_the_wait_resumes_the_run_with_its_payload(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant, awaitSignal="approval")
    parked = await watch.until(run_id, waiting)
    read = await api.gql(READ, {"id": run_id}, token=tenant.token)
    assert read["run"]["status"] == "WAITING"
    assert read["run"]["waitingFor"] == "approval"
    assert read["run"]["wakeAt"] is not None  # the default timeout, 3600 s
    assert parked.lease_expires_at is None  # no attempt holds it
    answer = await signal(api, tenant.token, run_id, "approval", {"ok": True})
    assert answer["accepted"] is True
    assert answer["run"]["status"] == "QUEUED"
    assert answer["run"]["waitingFor"] is None
    done = await watch.until(run_id, settled)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"turns": 1, "signal": {"ok": True}, "timedOut": False}
    assert done.attempt == 2  # the resume is a new claim ...
    assert done.resumes == 1  # ... that is not a retry
    events = await events_of(sessions, run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    waited = next(e for e in events if e.type == "waiting")
    assert waited.data["for"] == "approval"
    assert waited.data["until"] is not None
    at = types(events).index("waiting")
    assert types(events)[at : at + 4] == ["waiting", "signal", "resumed", "claimed"]
    # the signal's payload and who sent it: the run's audit trail
    assert events[at + 1].data == {
        "name": "approval",
        "payload": {"ok": True},
        "by": tenant.principal.user.email,
    }
    assert events[at + 2].data == {"by": "signal"}
    assert events[at + 3].data == {"attempt": 2}
    assert types(events)[-1] == "succeeded"


async def test_a_signal_sent_before_the_wait_is_kept_and_delivered_in_order(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    from outlive.worker import WorkerHost

    started = await api.start_run(
        tenant.token, "demo", {"turns": 1, "delayMs": 0, "awaitSignal": "go"}
    )
    run_id = started["run"]["id"]
    first = await signal(api, tenant.token, run_id, "go", {"n": 1}, key="k1")
    again = await signal(api, tenant.token, run_id, "go", {"n": 1}, key="k1")
    other = await signal(api, tenant.token, run_id, "other", {"n": 0})
    second = await signal(api, tenant.token, run_id, "go", {"n": 2})
    assert [first["accepted"], again["accepted"], other["accepted"], second["accepted"]] == [
        True,
        False,  # the repeated idempotencyKey
        True,
        True,
    ]
    assert first["run"]["status"] == "QUEUED"  # no worker yet: kept in the mailbox
    assert settings.redis_url is not None
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            done = await watch.until(run_id, settled)
    finally:
        await host.stop()
    assert done.status == "SUCCEEDED", done.error
    # the first signal of that name, first in first out; the run never had to wait
    assert done.output == {"turns": 1, "signal": {"n": 1}, "timedOut": False}
    events = await events_of(sessions, run_id)
    assert types(events).count("signal") == 3  # the duplicate left no trace
    assert "waiting" not in types(events)
    assert "resumed" not in types(events)
    async with sessions.unit() as uow:
        left = await uow.all(
            text(
                "SELECT name, payload FROM run_signals WHERE run_id = :r AND delivered_at IS NULL"
                " ORDER BY seq"
            ),
            r=UUID(run_id),
        )
    assert [(r["name"], r["payload"]) for r in left] == [("other", {"n": 0}), ("go", {"n": 2})]


@pytest.mark.usefixtures("worker")
async def test_a_signal_after_the_run_settled_is_not_accepted(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant)
    await watch.until(run_id, settled)
    before = await events_of(sessions, run_id)
    answer = await signal(api, tenant.token, run_id, "approval", {"late": True})
    assert answer == {
        "accepted": False,
        "run": {"id": run_id, "status": "SUCCEEDED", "waitingFor": None, "wakeAt": None},
    }
    assert await events_of(sessions, run_id) == before


async def test_another_tenant_cannot_signal_a_run_and_bad_input_writes_nothing(
    api: Api, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    started = await api.start_run(tenant.token, "demo", {"turns": 1, "awaitSignal": "x"})
    run_id = started["run"]["id"]
    with pytest.raises(GraphQLError) as caught:
        await signal(api, other_tenant.token, run_id, "x", {})
    assert caught.value.codes == ["NOT_FOUND"]
    with pytest.raises(GraphQLError) as caught:
        await signal(api, tenant.token, run_id, "x", {"blob": "a" * (64 * 1024)})
    assert caught.value.codes == ["BAD_USER_INPUT"]
    assert "64 KiB" in caught.value.errors[0]["message"]
    with pytest.raises(GraphQLError) as caught:
        await signal(api, tenant.token, run_id, "", {})
    assert caught.value.codes == ["BAD_USER_INPUT"]
    events = await events_of(sessions, run_id)
    assert "signal" not in types(events)
    async with sessions.unit() as uow:
        row = await uow.one(
            text("SELECT count(*) AS n FROM run_signals WHERE run_id = :r"), r=UUID(run_id)
        )
    assert row is not None
    assert row["n"] == 0


async def test_signals_take_from_a_per_tenant_rate_limit(
    servers: Any, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    from tests.conftest import make_settings

    async with Api.running(make_settings(servers, rate_signal_run="2/3600")) as api:
        run_id = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
        for _ in range(2):
            assert (await signal(api, tenant.token, run_id, "x"))["accepted"]
        with pytest.raises(GraphQLError) as caught:
            await signal(api, tenant.token, run_id, "x")
        assert caught.value.codes == ["RATE_LIMITED"]
        theirs = (await api.start_run(other_tenant.token, "demo", {"turns": 1}))["run"]["id"]
        assert (await signal(api, other_tenant.token, theirs, "x"))["accepted"]


@pytest.mark.usefixtures("worker")
async def test_a_waiting_run_keeps_its_agent_slot_but_not_its_place_under_the_cap(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    async with sessions.unit() as uow:  # a cap of 1 (below the 2 agents): runs can wait
        await uow.execute(
            text("UPDATE tenants SET max_running_runs = 1 WHERE id = :t"), t=tenant.id
        )
    run_id = await demo(api, tenant, awaitSignal="go")
    await watch.until(run_id, waiting)
    again = await api.start_run(tenant.token, "demo", {"turns": 5})
    assert again["created"] is False
    assert again["run"]["id"] == run_id
    assert again["run"]["status"] == "WAITING"
    # The WAITING run holds no place under the cap: another agent's run is admitted at once.
    llm = await api.start_run(tenant.token, "llm", {"prompt": "hi"})
    record = await runs_service.read_run(
        sessions, TenantId(tenant.id), RunId(UUID(llm["run"]["id"]))
    )
    assert record is not None
    assert record.dispatched_at is not None
    await watch.until(llm["run"]["id"], settled)  # it fails (no endpoint): its slot frees
    # Woken while the cap's one slot is free: admitted and run.
    await signal(api, tenant.token, run_id, "go", "yes")
    done = await watch.until(run_id, settled)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"turns": 1, "signal": "yes", "timedOut": False}


@pytest.mark.usefixtures("worker")
async def test_cancel_settles_a_waiting_run_at_once(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant, pauseMs=3_600_000)
    await watch.until(run_id, waiting)
    read = await api.gql(READ, {"id": run_id}, token=tenant.token)
    assert read["run"]["waitingFor"] is None  # a timer
    assert read["run"]["wakeAt"] is not None
    cancelled = await api.cancel(tenant.token, run_id)
    assert cancelled["status"] == "CANCELLED"
    events = await events_of(sessions, run_id)
    assert types(events)[-2:] == ["waiting", "cancelled"]
    assert events[-2].data["for"] is None
    assert (await signal(api, tenant.token, run_id, "x"))["accepted"] is False


@pytest.mark.usefixtures("worker")
async def test_a_durable_sleep_parks_the_run_and_its_timer_resumes_it(
    api: Api, sessions: Sessions, settings: Settings, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant, turns=2, pauseMs=1500)
    parked = await watch.until(run_id, waiting)
    assert parked.waiting_for is None
    assert parked.wake_at is not None
    done = await watch.until(run_id, settled)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"turns": 2}
    assert (done.attempt, done.resumes) == (2, 1)
    events = await events_of(sessions, run_id)
    resumed = next(e for e in events if e.type == "resumed")
    assert resumed.data == {"by": "timer"}
    # Handed back ahead of its due time, at most by the lead (`OUTLIVE_WAKE_LEAD_S`)...
    assert resumed.at >= parked.wake_at - timedelta(seconds=settings.wake_lead_s)
    # ...but the code after the sleep never runs early: turn 2 is recorded at or after it.
    turn_2 = next(e for e in events if e.type == "turn" and e.data == {"turn": 2})
    assert turn_2.at >= parked.wake_at
    at = types(events).index("resumed")
    assert types(events)[at - 1 : at + 2] == ["waiting", "resumed", "claimed"]
    # The resumed attempt got past the satisfied sleep at once: exactly one wait.
    assert types(events).count("waiting") == 1


@pytest.mark.usefixtures("worker")
async def test_a_wait_that_times_out_returns_null(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant, awaitSignal="approval", signalTimeoutS=1)
    done = await watch.until(run_id, settled)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"turns": 1, "signal": None, "timedOut": True}
    events = await events_of(sessions, run_id)
    assert [e.data for e in events if e.type == "resumed"] == [{"by": "timeout"}]


@pytest.mark.parametrize(
    "bad",
    [{"signalTimeoutS": 0}, {"signalTimeoutS": 2_592_001}, {"pauseMs": -1}, {"awaitSignal": ""}],
)
async def test_the_demo_checks_its_wait_input(
    api: Api, tenant: TenantHandle, bad: dict[str, Any]
) -> None:
    with pytest.raises(GraphQLError) as caught:
        await api.start_run(tenant.token, "demo", {"turns": 1, **bad})
    assert caught.value.codes == ["BAD_USER_INPUT"]


@pytest.mark.usefixtures("worker")
async def test_a_sleep_and_a_wait_between_steps_run_no_turn_twice(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    """Steps and waits together (issue 18): the demo sleeps durably after turn 1 and waits for a
    signal after turn 3, so three attempts run it from the top; turns recorded by an earlier
    attempt are answered from the journal, and each `turn` and `step` event appears once."""
    run_id = await demo(api, tenant, turns=3, pauseMs=1200, awaitSignal="approval")
    await watch.until(run_id, lambda r: r.status == RunStatus.WAITING and bool(r.waiting_for))
    answer = await signal(api, tenant.token, run_id, "approval", {"approved": True})
    assert answer["accepted"] is True
    done = await watch.until(run_id, settled)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"turns": 3, "signal": {"approved": True}, "timedOut": False}
    assert (done.attempt, done.resumes) == (3, 2)  # two resumes, no retry
    events = await events_of(sessions, run_id)
    assert [e.data["turn"] for e in events if e.type == "turn"] == [1, 2, 3]
    assert [e.data for e in events if e.type == "step"] == [
        {"name": "turn", "occurrence": i} for i in (1, 2, 3)
    ]
    assert [e.data["by"] for e in events if e.type == "resumed"] == ["timer", "signal"]
    steps = await api.gql(
        "query($id: ID!) { run(id: $id) { steps { seq name occurrence attempt } } }",
        {"id": run_id},
        token=tenant.token,
    )
    assert [(s["name"], s["occurrence"], s["attempt"]) for s in steps["run"]["steps"]] == [
        ("turn", 1, 1),
        ("turn", 2, 2),
        ("turn", 3, 2),
    ]
