"""A retry by design is never an ERROR (issue 19, R11): saq logs every exception a job raises at
ERROR with a traceback, which made each run's `RetryLater` and each webhook delivery that will be
tried again page whoever alerts on ERROR (and let any tenant with a failing endpoint do so). A real
`outlive worker` process, its JSON log read back."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import Any

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.telemetry import logs
from outlive.workflows.runs import RetryLater
from tests.jobs.test_webhooks import CREATE, _settle_a_run, _wait_delivery, receiver
from tests.support import Api, NudgeWatch, TenantHandle, service_env, settled, spawn_outlive

__all__ = ["receiver"]  # the fixture

pytestmark = pytest.mark.timeout(120)


async def test_designed_retries_of_a_real_worker_log_no_error(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    receiver: Any,
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    r, url = receiver
    r.statuses = [500]  # the first delivery attempt fails, the second is answered 200
    await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
    path = tmp_path / "worker.log"
    env = service_env(
        settings,
        OUTLIVE_LOG_FORMAT="json",
        OUTLIVE_RUN_RETRY_DELAY_S="0.1",
        OUTLIVE_JOB_RETRY_BASE_S="0.1",
        OUTLIVE_WEBHOOK_ALLOW_PRIVATE="1",
    )
    with path.open("wb") as log:
        worker = spawn_outlive("worker", "--concurrency", "2", env=env, log=log)
        try:
            async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
                flaky = await api.start_run(
                    tenant.token, "demo", {"turns": 1, "delayMs": 0, "flakyAttempts": 1}
                )
                done = await watch.until(flaky["run"]["id"], settled)
                assert (done.status, done.attempt) == ("SUCCEEDED", 2)  # retried once
                await _settle_a_run(api, watch, tenant.token)
                delivered = await _wait_delivery(api, watch, tenant.token, "DELIVERED")
                assert delivered["attempts"] == 2  # retried once
        finally:
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
    parsed = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    errors = [p for p in parsed if p["level"] in ("ERROR", "CRITICAL")]
    assert errors == []
    assert [p for p in parsed if "exc_info" in p] == []  # no traceback for what was designed
    retried = [p for p in parsed if p["level"] == "WARNING" and "will be retried" in p["message"]]
    assert len(retried) == 1, parsed  # the run's retry, said once by saq's logger, one line
    assert retried[0]["logger"] == "saq"
    assert "flaky fault" in retried[0]["message"]
    consumer = [p for p in parsed if "retrying in" in p["message"]]
    assert len(consumer) == 1  # the delivery's retry, said once, by the consumer
    assert consumer[0]["level"] == "WARNING"


def test_an_unexpected_error_keeps_its_error_and_traceback() -> None:
    """The filter only touches retries by design."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("outlive.test.retries")
    quiet, keep = logs.QuietRetries(), Keep()
    logger.addFilter(quiet)
    logger.addHandler(keep)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        for exc in (RuntimeError("a bug"), RetryLater(1, "lease held", counts=False)):
            try:
                raise exc
            except Exception:
                logger.exception("Error processing job %s", "job-1")
    finally:
        logger.removeFilter(quiet)
        logger.removeHandler(keep)
    bug, lease = records
    assert (bug.levelno, bug.exc_info is not None) == (logging.ERROR, True)
    assert (lease.levelno, lease.exc_info) == (logging.INFO, None)
    assert "lease held" in lease.getMessage()
