"""A run's step journal is bounded (security review round 4: I8). Every attempt loads the whole
journal; before, nothing bounded it, so a third-party agent with many large steps made each
attempt load all of them. Past `OUTLIVE_RUN_JOURNAL_MAX_BYTES` the run fails, saying why, and a
load never reads more than one row past the bound."""

from __future__ import annotations

from uuid import UUID

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.errors import JournalTooLarge
from outlive.ids import RunId
from outlive.services.runs import load_journal
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

TURNS = 600  # each turn is a step returning its number: 600 of them hold 1,692 bytes


async def _run_demo(
    settings: Settings, sessions: Sessions, tenant: TenantHandle, turns: int
) -> tuple[str, object]:
    assert settings.redis_url is not None
    async with (
        Api.running(settings) as api,
        NudgeWatch(settings.redis_url, sessions, tenant.id) as watch,
    ):
        host = WorkerHost(settings, concurrency=2)
        await host.start()
        try:
            started = await api.start_run(tenant.token, "demo", {"turns": turns, "delayMs": 0})
            run_id = started["run"]["id"]
            return run_id, await watch.until(run_id, settled)
        finally:
            await host.stop()


async def test_a_run_whose_journal_outgrows_the_bound_fails_saying_so(
    servers: Servers, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    small = make_settings(servers, run_journal_max_bytes=1024)
    small = small.model_copy(update={"database_url": settings.database_url})
    run_id, done = await _run_demo(small, sessions, tenant, TURNS)
    assert done.status == "FAILED"  # type: ignore[attr-defined]
    assert "OUTLIVE_RUN_JOURNAL_MAX_BYTES" in done.error  # type: ignore[attr-defined]
    journal, size = await load_journal(sessions, RunId(UUID(run_id)), max_bytes=1024)
    assert 0 < size <= 1024  # what was recorded stayed within the bound
    assert len(journal) < TURNS


async def test_a_load_past_the_bound_fails_instead_of_reading_it_all(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id, done = await _run_demo(settings, sessions, tenant, TURNS)
    assert done.status == "SUCCEEDED"  # type: ignore[attr-defined]
    journal, size = await load_journal(sessions, RunId(UUID(run_id)))
    assert len(journal) == TURNS
    assert size == 1692
    with pytest.raises(JournalTooLarge) as refused:
        await load_journal(sessions, RunId(UUID(run_id)), max_bytes=1024)
    assert "OUTLIVE_RUN_JOURNAL_MAX_BYTES (1024)" in str(refused.value)
