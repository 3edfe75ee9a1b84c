"""The chaos runs at a size CI can afford. Issue 9's: about 60 runs under about 40 s of rolling
SIGKILLs of workers, one SIGKILL of an API process and one of Redis (with its AOF). Issue 17's
(`needs_relay`): every fault at once, on a PostgreSQL of its own, for a minute. `bench/chaos.py`
runs them longer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.chaos.harness import Plan, run_chaos
from tests.chaos.schedule import ONE_OFF, parse_faults
from tests.support import Servers

PLAN = Plan(
    tenants=6,
    runs_per_tenant=10,
    turns=3,
    delay_ms=400,
    fault_s=40,
    kill_every_s=(3, 6),
    settle_timeout_s=120,
    read_deliveries=False,  # the relay repairs a delivery lost with Redis: nobody reads it
)

# FLUSHALL, an empty Redis, a Redis frozen for 20 s, PostgreSQL SIGKILLed and down for 3 s, the
# rolling worker kills, an API kill, and a busy loop on every core throughout. The clients learn
# that a run settled from its webhook: they read neither runs nor deliveries.
FAULTS = Plan(
    tenants=6,
    runs_per_tenant=8,
    turns=3,
    delay_ms=400,
    fault_s=60,
    kill_every_s=(4, 8),
    settle_timeout_s=75,
    keep_going=True,  # the faults late in the window find runs to break
    faults=parse_faults("all"),
    redis_stop_s=20,
    postgres_down_s=3,
    postgres_only=True,
    read_runs=False,  # nothing read through the API repairs anything: the relay must
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


@pytest.mark.needs_relay
@pytest.mark.timeout(360)
async def test_nothing_is_lost_when_redis_forgets_postgres_restarts_and_the_cpu_starves(
    tmp_path: Path,
) -> None:
    report = await run_chaos(FAULTS, None, tmp_path)  # None: a PostgreSQL of its own, to kill
    figures = json.dumps(report.summary(), indent=1)
    assert report.faults == dict.fromkeys(ONE_OFF, 1) | {"cpu": os.cpu_count()}, figures
    assert report.worker_kills >= 4, figures
    assert report.runs >= FAULTS.tenants * FAULTS.runs_per_tenant, figures
    assert report.violations == [], figures
    assert (report.stranded, report.concurrent_attempts, report.failed) == (0, 0, 0), figures
    assert report.delivered == report.deliveries == report.runs, figures
    assert report.never_handed_over == {}, figures
    assert report.mutation_errors_pg_down == 0, figures
    assert len(report.pg_recovery_s) == 1, figures
