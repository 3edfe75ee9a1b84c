"""Issue 9's chaos run at a size CI can afford: about 60 runs under about 40 s of rolling SIGKILLs
of workers, one SIGKILL of an API process and one of Redis. `bench/chaos.py` runs it longer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.harness import Plan, run_chaos
from tests.support import Servers

PLAN = Plan(
    tenants=6,
    runs_per_tenant=10,
    turns=3,
    delay_ms=400,
    fault_s=40,
    kill_every_s=(3, 6),
    settle_timeout_s=120,
)


@pytest.mark.timeout(400)
async def test_no_run_is_stranded_or_run_twice_under_rolling_sigkills(
    servers: Servers, tmp_path: Path
) -> None:
    report = await run_chaos(PLAN, await servers.clone(), tmp_path)
    figures = json.dumps(report.summary(), indent=1)
    assert report.runs >= PLAN.tenants * PLAN.runs_per_tenant, figures
    assert report.worker_kills >= 5, figures
    assert (report.api_kills, report.redis_kills) == (1, 1), figures
    assert report.violations == [], figures
    assert report.stranded == 0, figures
    assert report.concurrent_attempts == 0, figures
    assert report.failed == 0, figures
    assert report.delivered == report.deliveries == report.runs, figures
    assert report.unseen_webhook_ids == 0, figures
