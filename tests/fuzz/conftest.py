"""The fuzzer's fixtures: every ERROR line of the loggers that would page someone, and the
requirement checks every answer must meet."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings

LOGGERS = ("outlive", "strawberry", "uvicorn", "asyncio", "saq", "graphql")
SCALE = float(os.environ.get("OUTLIVE_FUZZ_SCALE", "1"))  # examples per test, times this


def budget(examples: int) -> settings:
    """A fixed seed (derandomized: CI runs the same examples every time) and a fixed number of
    examples, the suite's ~60 s; no example database, no deadline (a shared machine)."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )


# The second pass: a seed of its own each run, printed in the report's header (and replayed with
# OUTLIVE_FUZZ_SEED=N). A seed that finds something becomes a fixed case in test_cases.py.
FRESH_SEED = int(os.environ.get("OUTLIVE_FUZZ_SEED") or secrets.randbits(32))


def fresh_budget(examples: int) -> settings:
    """`budget`, but drawn from `FRESH_SEED` instead of the fixed derandomized sequence."""
    return settings(budget(examples), derandomize=False)


def pytest_report_header() -> str:
    return f"fuzz: fresh seed {FRESH_SEED} (replay: OUTLIVE_FUZZ_SEED={FRESH_SEED})"


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records]


@pytest.fixture
def errors() -> Iterator[Errors]:
    """ERROR (and CRITICAL) records of every logger that matters, whatever their propagation;
    the test fails if any was written."""
    handler = Errors()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    assert handler.lines() == []


def check_answer(response: httpx.Response, path: str = "/graphql") -> None:
    """No 5xx, and on /graphql always JSON (the contract's shape for an error)."""
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if path != "/graphql":
        return
    assert response.headers.get("content-type", "").startswith("application/json"), response
    if response.request.method == "HEAD":
        return
    body = response.json()
    assert isinstance(body, dict), body
    for error in body.get("errors") or []:
        assert isinstance(error["message"], str)
        assert isinstance(error["extensions"]["code"], str)
