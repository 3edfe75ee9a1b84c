"""Execute: retryable faults re-claim up to three attempts; anything else fails at once."""

from __future__ import annotations

from typing import Any

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services import runs as runs_service
from tests.support import Api, NudgeWatch, TenantHandle, settled


async def run_to_the_end(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle, input: dict[str, Any]
) -> tuple[runs_service.RunRecord, list[runs_service.EventRecord]]:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "demo", input)
        run = await watch.until(started["run"]["id"], settled)
    events = await runs_service.list_events(sessions, run.id)
    return run, events


@pytest.mark.usefixtures("worker")
async def test_a_retryable_fault_is_retried_up_to_three_attempts_then_fails(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    run, events = await run_to_the_end(
        api, settings, sessions, tenant, {"turns": 1, "delayMs": 0, "flakyAttempts": 5}
    )
    assert run.status == "FAILED"
    assert run.attempt == 3
    assert "flaky fault" in (run.error or "")
    assert "after 3 attempts" in (run.error or "")
    assert [e.type for e in events] == [
        "claimed",
        "retrying",
        "claimed",
        "retrying",
        "claimed",
        "failed",
    ]
    retrying = [e.data for e in events if e.type == "retrying"]
    delay = settings.run_retry_delay_s
    assert [r["delayS"] for r in retrying] == [delay, delay * 2]  # doubling
    assert [e.data["attempt"] for e in events if e.type == "claimed"] == [1, 2, 3]


@pytest.mark.usefixtures("worker")
async def test_a_run_that_recovers_on_its_third_attempt_succeeds(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    run, events = await run_to_the_end(
        api, settings, sessions, tenant, {"turns": 2, "delayMs": 0, "flakyAttempts": 2}
    )
    assert run.status == "SUCCEEDED"
    assert run.attempt == 3
    assert run.output == {"turns": 2}
    assert [e.type for e in events][-6:] == ["claimed", "turn", "step", "turn", "step", "succeeded"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


@pytest.mark.usefixtures("worker")
async def test_a_non_retryable_fault_fails_at_the_first_attempt(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    run, events = await run_to_the_end(
        api, settings, sessions, tenant, {"turns": 3, "delayMs": 0, "failAtTurn": 2}
    )
    assert run.status == "FAILED"
    assert run.attempt == 1
    assert run.error == "DemoFailure: failing at turn 2 as asked"
    assert [e.type for e in events] == ["claimed", "turn", "step", "failed"]


async def test_the_execute_timeout_counts_as_a_retryable_fault(
    api: Api, servers: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    from outlive.worker import WorkerHost
    from tests.conftest import make_settings

    settings = make_settings(servers, run_timeout_s=0.3, run_retry_delay_s=0.05)
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        run, _events = await run_to_the_end(
            api, settings, sessions, tenant, {"turns": 1, "delayMs": 5000}
        )
    finally:
        await host.stop()
    assert run.status == "FAILED"
    assert run.attempt == 3
    assert run.error == "timed out after 0.3s (after 3 attempts)"


@pytest.mark.usefixtures("worker")
async def test_cancelling_a_running_run_stops_it_before_its_next_turn(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "demo", {"turns": 1000, "delayMs": 20})
        run_id = started["run"]["id"]
        await watch.until(run_id, lambda r: r.status == "RUNNING")
        cancelled = await api.cancel(tenant.token, run_id)
        assert cancelled["status"] == "RUNNING"
        assert cancelled["cancelRequestedAt"]
        run = await watch.until(run_id, settled)
    assert run.status == "CANCELLED"
    events = await runs_service.list_events(sessions, run.id)
    types = [e.type for e in events]
    assert types[-1] == "cancelled"
    assert types.count("turn") < 1000
    # nothing after the request but, at most, the turn already under way (its `turn` and `step`
    # events), then the settle
    assert len(types) - types.index("cancel_requested") <= 4
