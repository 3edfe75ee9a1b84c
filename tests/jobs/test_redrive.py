"""Poison messages sent again: each is re-validated against today's envelopes; a valid one is
queued and handled; one that is still invalid is recorded again, never sent, so it cannot loop."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from saq.job import Status
from sqlalchemy import select

from outlive.config import Settings
from outlive.db.models import RejectedJob
from outlive.db.tx import Sessions
from outlive.jobs.envelopes import ENVELOPES, Payload
from outlive.jobs.producer import CONSUME_TASK
from outlive.jobs.redrive import list_rejected, redrive
from tests.jobs.conftest import Spy
from tests.jobs.test_consumer import consume_jobs
from tests.support import service_env

pytestmark = pytest.mark.timeout(120)


class HelloV1(Payload):
    name: str


def envelope(type: str, payload: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": str(uuid.uuid4()),
            "type": type,
            "payload": payload,
            "enqueued_at": "2026-12-01T00:00:00Z",
        }
    )


async def rejected_rows(sessions: Sessions, marker: str) -> list[RejectedJob]:
    rows = [row["RejectedJob"] for row in await sessions.all(select(RejectedJob))]
    return [r for r in rows if marker in r.body]


async def test_a_poison_message_valid_today_is_sent_again_and_handled(
    jobs_world: Any, sessions: Sessions
) -> None:
    """`test.hello.v1` did not exist when the message arrived; it does now."""
    spy = Spy()
    marker = uuid.uuid4().hex
    async with jobs_world() as world:
        key = f"poison-{marker}"
        body = envelope("test.hello.v1", {"name": marker})
        await world.queue.enqueue(CONSUME_TASK, key=key, body=body)
        await world.finished(key)
        (row,) = await rejected_rows(sessions, marker)
        assert row.type == "test.hello.v1"

        world.host.deps.jobs.types = ENVELOPES.with_type("test.hello.v1", HelloV1)
        world.host.deps.jobs.handlers["test.hello.v1"] = spy.handler()
        wired = sessions.wired(jobs=world.producer(world.host.deps.jobs.types))
        result = await redrive(wired, row.id, world.host.deps.jobs.types)
        assert result.result == "sent"
        assert result.sent_as is not None
        job = await world.finished(str(result.sent_as))
        assert job.status == Status.COMPLETE
        again = await redrive(wired, row.id, world.host.deps.jobs.types)
    assert again.result == "skipped"  # redriven once, never twice
    assert [p.name for _, p in spy.calls] == [marker]
    (row,) = await rejected_rows(sessions, marker)
    assert row.redriven_as == result.sent_as
    assert row.redriven_at is not None
    assert row.redrive_attempts == 1


async def test_a_still_invalid_message_is_recorded_again_and_never_sent(
    jobs_world: Any, sessions: Sessions
) -> None:
    marker = uuid.uuid4().hex
    async with jobs_world() as world:
        key = f"poison-{marker}"
        await world.queue.enqueue(CONSUME_TASK, key=key, body=envelope("nope.v1", {"m": marker}))
        await world.finished(key)
        (row,) = await rejected_rows(sessions, marker)
        first_error = row.error
        wired = sessions.wired(jobs=world.producer(ENVELOPES))
        before = await consume_jobs(world.queue)
        for attempt in (1, 2, 3):
            result = await redrive(wired, row.id)
            assert result.result == "invalid"
            assert "nope.v1" in (result.error or "") or "tag" in (result.error or "")
            (row,) = await rejected_rows(sessions, marker)
            assert row.redrive_attempts == attempt
        assert await consume_jobs(world.queue) == before  # nothing reached the queue
    (row,) = await rejected_rows(sessions, marker)  # still one row: it did not loop back in
    assert row.redriven_at is None
    assert row.last_redrive_at is not None
    assert row.error
    assert first_error
    listed = await list_rejected(sessions)
    assert row.id in [r.id for r in listed]  # still waiting for a fix


async def test_the_cli_lists_and_redrives(
    settings: Settings, sessions: Sessions, worker: Any
) -> None:
    marker = uuid.uuid4().hex
    valid = envelope("email.invitation.v1", {"invitationId": str(uuid.uuid4())})
    async with sessions.unit() as uow:
        # the saq arguments around a valid envelope (an extra argument made it poison)
        good = RejectedJob(
            type="email.invitation.v1",
            body=json.dumps({"body": valid, "extra": marker}),
            error="a job carries exactly one str argument `body`",
        )
        bad = RejectedJob(type=None, body=f"not json {marker}", error="Invalid JSON")
        uow.session.add_all([good, bad])
    env = service_env(settings)

    listed = await _outlive(env, "jobs", "rejected", "--json", "--limit", "1000")
    assert listed.returncode == 0, listed.stderr
    ids = {json.loads(line)["id"] for line in listed.stdout.splitlines()}
    assert {str(good.id), str(bad.id)} <= ids

    done = await _outlive(env, "jobs", "redrive", str(good.id), str(bad.id))
    assert done.returncode == 1  # one of them is still invalid
    assert f"{good.id} sent again as" in done.stdout
    assert f"{bad.id} still invalid, recorded again" in done.stdout
    assert done.stderr.strip().endswith("1 of 2 rejected job(s) are still invalid")

    left = await _outlive(env, "jobs", "rejected")
    assert str(bad.id) in left.stdout
    assert str(good.id) not in left.stdout  # redriven: listed only with --all
    everything = await _outlive(env, "jobs", "rejected", "--all")
    assert f"{good.id}" in everything.stdout
    assert "redriven as" in everything.stdout

    nothing = await _outlive(env, "jobs", "redrive")
    assert nothing.returncode == 2
    unknown = await _outlive(env, "jobs", "redrive", str(uuid.uuid4()))
    assert unknown.returncode == 2
    assert "no rejected job waiting" in unknown.stderr


async def _outlive(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    import os

    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "outlive.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
