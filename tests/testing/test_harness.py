"""`outlive.testing`: an agent that sleeps 30 days and then waits for an approval, tested in the
test's own process on real PostgreSQL and Redis, its sleep skipped by the fake clock; a wait's
timeout and a budget's day skipped the same way; the assertions on steps and usage."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from outlive.testing import Harness, assert_steps, assert_usage
from tests.conftest import make_settings, with_own_database
from tests.support import Servers

pytestmark = pytest.mark.timeout(120)
AGENTS = ["tests.testing.kit_agents:REVIEW", "tests.testing.kit_agents:REMIND"]
BUDGET_S = 1.0  # the figure: the whole month, tested in under a second


@pytest.fixture
async def harness(servers: Servers) -> AsyncIterator[Harness]:
    own = await with_own_database(servers)
    async with Harness(agents=AGENTS, settings=make_settings(own)) as h:
        yield h


async def test_an_agent_that_sleeps_30_days_then_waits_for_an_approval_in_under_a_second(
    harness: Harness,
) -> None:
    await _month(harness, "warm-up")  # a process's first run pays its one-time costs (caches)
    skipped = harness.clock.skipped
    began = time.perf_counter()
    run_id, waiting, output = await _month(harness, "spec")
    elapsed = time.perf_counter() - began

    assert waiting["status"] == "WAITING"
    assert waiting["waitingFor"] == "approval"
    assert waiting["waitId"] == "publish"
    assert waiting["waitingShow"] == {"draft": "draft of spec, rechecked"}
    assert output == {"published": True, "text": "DRAFT OF SPEC, RECHECKED"}
    assert round((harness.clock.skipped - skipped).total_seconds() / 86400, 3) == 30
    await assert_steps(harness, run_id, ["draft", "recheck", "publish"])
    await assert_usage(harness, run_id, requests=0, input_tokens=0)
    print(f"30-day sleep and an approval: {elapsed:.3f} s")  # noqa: T201
    assert elapsed < BUDGET_S * _slack(), elapsed


async def test_a_wait_times_out_when_the_clock_passes_its_timeout(harness: Harness) -> None:
    run_id = await harness.start("remind", {"days": 7})
    waiting = await harness.drive(run_id)  # a wait for a signal: drive stops there
    assert waiting["waitingFor"] == "reply"
    before = harness.clock.skipped
    assert await harness.clock.skip_to_next_timer()  # its timeout
    assert await harness.result(run_id) == {"answered": False}
    assert round((harness.clock.skipped - before).total_seconds() / 86400, 3) == 7


async def _month(harness: Harness, doc: str) -> tuple[str, dict[str, Any], Any]:
    run_id = await harness.start("review", {"doc": doc})
    waiting = await harness.drive(run_id)
    assert await harness.approve(run_id)
    return run_id, waiting, await harness.result(run_id)


def _slack() -> float:
    """How much slower than the issue's figure a shared machine may be (the figure itself is
    measured on a quiet one: docs/testing-agents.md); `OUTLIVE_HARNESS_SLACK=1` holds it exactly."""
    import os

    return float(os.environ.get("OUTLIVE_HARNESS_SLACK", "3"))
