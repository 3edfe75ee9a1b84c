"""`outlive.client` against a live API (uvicorn on loopback, its WebSocket too) and a worker:
startRun with every option, runs and its filters, events and steps, signals, cancel, a run read
token, and runOutput streamed to the end of the run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from outlive.client import OutliveClient, OutliveError, RunConflict, RunStatus
from outlive.config import Settings
from tests.realtime.clients import Served, serve
from tests.support import TenantHandle

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[Served]:
    async with serve(settings) as live:
        yield live


@pytest.fixture
async def client(served: Served, tenant: TenantHandle) -> AsyncIterator[OutliveClient]:
    async with OutliveClient(served.url, tenant.token) as own:
        yield own


async def _settled(client: OutliveClient, run_id: str) -> Any:
    """The run once settled: `runOutput` completes when it does."""
    async for _ in client.run_output(run_id):
        pass
    run = await client.run(run_id)
    assert run is not None
    return run


async def test_start_run_with_every_option_and_read_it_back(
    client: OutliveClient, worker: Any
) -> None:
    options: dict[str, Any] = {
        "key": "conversation-1",
        "on_conflict": RunConflict.RETURN_EXISTING,
        "tags": ["team:a", "kit"],
        "idempotency_key": "once-1",
    }
    started = await client.start_run("demo", {"turns": 2, "delayMs": 0}, **options)
    again = await client.start_run("demo", {"turns": 2, "delayMs": 0}, **options)
    run = await _settled(client, started.run.id)
    page = await client.runs(agent="demo", tags=["kit"], status=[RunStatus.SUCCEEDED])
    steps = await client.steps(run.id)
    events = await client.events(run.id)

    assert started.created is True
    assert again.created is False
    assert again.run.id == started.run.id
    assert started.run.key == "conversation-1"
    assert started.run.tags == ["team:a", "kit"]
    assert run.status is RunStatus.SUCCEEDED
    assert run.status.settled
    assert run.finished_at is not None
    assert run.usage.requests == 0
    assert [r.id for r in page.runs] == [run.id]
    assert page.page_info.has_next_page is False
    assert [(s.name, s.occurrence) for s in steps] == [("turn", 1), ("turn", 2)]
    assert [e.type for e in events].count("turn") == 2


async def test_a_signal_answers_a_wait_and_cancel_and_errors_are_typed(
    client: OutliveClient, worker: Any
) -> None:
    waiting = await client.start_run("demo", {"turns": 1, "delayMs": 0, "awaitSignal": "go"})
    sent = await client.signal_run(waiting.run.id, "go", {"ok": True}, idempotency_key="s1")
    repeated = await client.signal_run(waiting.run.id, "go", {"ok": True}, idempotency_key="s1")
    done = await _settled(client, waiting.run.id)
    long = await client.start_run("demo", {"turns": 50, "delayMs": 1000})
    cancelled = await client.cancel_run(long.run.id)

    assert sent.accepted is True
    assert repeated.accepted is False
    assert done.status is RunStatus.SUCCEEDED
    assert cancelled.cancel_requested_at is not None or cancelled.status is RunStatus.CANCELLED
    assert await client.run("00000000-0000-0000-0000-000000000000") is None
    with pytest.raises(OutliveError) as refused:
        await client.start_run("no-such-agent")
    assert refused.value.code == "BAD_USER_INPUT"


async def test_run_output_streams_every_chunk_and_a_read_token_reads_that_run_only(
    client: OutliveClient, served: Served, worker: Any
) -> None:
    started = await client.start_run(
        "demo", {"turns": 2, "delayMs": 0, "streamChars": 50, "streamDelayMs": 1}
    )
    chunks = [c async for c in client.run_output(started.run.id)]
    token = await client.create_run_read_token(started.run.id, ttl_seconds=60)
    other = await client.start_run("demo", {"turns": 1, "delayMs": 0})
    async with OutliveClient(served.url, token) as reader:
        seen = await reader.run(started.run.id)
        replayed = [c async for c in reader.run_output(started.run.id)]
        hidden = await reader.run(other.run.id)

    text = "".join(c.text for c in chunks if not c.reset)
    assert len(text) == 100  # two turns of 50 characters
    assert all(c.run_id == started.run.id and c.stream == "answer" for c in chunks)
    assert seen is not None
    assert seen.status is RunStatus.SUCCEEDED
    assert "".join(c.text for c in replayed) == text  # still kept: read again from the start
    assert hidden is None
