"""A quiet log when all is well (issue 25): a real `outlive worker` on a new, empty queue, then
SIGTERM while it is idle, logs no WARNING. The queue's marker is missing at its first relay pass
(the queue is new): that is INFO. The idle saq tasks (dequeues waiting for work, upkeep loops)
are cancelled by the worker itself, so saq has nothing left to warn about."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

import pytest

from outlive.config import Settings
from tests.support import service_env

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def worker_process(settings: Settings) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "outlive.cli", "worker"],
        env={**service_env(settings), "OUTLIVE_LOG_FORMAT": "text", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    with process, process.stdout or contextlib.nullcontext():
        yield process
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def _read_until(out: IO[bytes], needle: str, lines: list[str]) -> None:
    """Read the process's output line by line (each read waits for the next line) until one
    holds `needle`; every line is kept in `lines`."""
    while True:
        line = (await asyncio.to_thread(out.readline)).decode(errors="replace")
        if not line:
            raise AssertionError(f"the worker ended before logging {needle!r}:\n{''.join(lines)}")
        lines.append(line)
        if needle in line:
            return


async def test_an_idle_worker_on_a_new_queue_starts_and_stops_on_sigterm_without_a_warning(
    worker_process: subprocess.Popen[bytes],
) -> None:
    out = worker_process.stdout
    assert out is not None
    lines: list[str] = []
    # The relay's first pass finds the new queue (INFO), after the worker has started.
    await asyncio.wait_for(_read_until(out, "the queue lost its data", lines), timeout=60)
    worker_process.send_signal(signal.SIGTERM)
    rest = await asyncio.wait_for(asyncio.to_thread(out.read), timeout=60)
    lines.extend(rest.decode(errors="replace").splitlines(keepends=True))
    assert await asyncio.to_thread(worker_process.wait, 30) == 0
    log = "".join(lines)
    assert "worker stopping" in log  # it really went through the graceful stop
    assert "0 row(s)" in log
    warnings = [line for line in lines if "WARNING" in line or "ERROR" in line]
    assert warnings == [], log
