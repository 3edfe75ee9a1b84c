"""A worker says when its start-up is over: the agents' modules imported (`Agent.warm`) and what
they made frozen. Until then a thread of its start-up shares the process with its loop, which a
latency measurement waits out (`bench/fairness.py` waits for this line)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from outlive.config import Settings
from outlive.worker import WorkerHost


async def test_a_worker_logs_once_it_is_warm(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="outlive.worker")
    host = WorkerHost(settings, concurrency=1, jobs_concurrency=1)
    await host.start()
    try:
        warming = [t for t in asyncio.all_tasks() if t.get_name() == "outlive-warm-up"]
        assert len(warming) == 1
        await warming[0]
        warm = [r.getMessage() for r in caplog.records if "worker warm" in r.getMessage()]
        assert len(warm) == 1
        assert "agents' modules imported in" in warm[0]
    finally:
        await host.stop()
