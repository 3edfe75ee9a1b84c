"""The consumer: poison messages are recorded and acknowledged; handlers retry on an exact
schedule; the version seam lets v1 drain beside v2; jobs leave only after the commit."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
from saq.job import Status
from sqlalchemy import select

from outlive.db.models import RejectedJob
from outlive.db.tx import Sessions
from outlive.jobs.envelopes import ENVELOPES, EnvelopeTypes, InvalidJob, Payload
from outlive.jobs.producer import CONSUME_TASK
from tests.jobs.conftest import Spy
from tests.support import TenantHandle


async def consume_jobs(queue: Any) -> int:
    """Jobs of the consumer in the queue, in every partition of it (cron ticks share the queue and
    are not counted). `scan_iter` visits every master of a cluster (saq's `iter_jobs` takes
    SCAN's cursor for one Redis's, and reads one partition)."""
    count = 0
    for part in queue.partitions:
        ids = [job_id async for job_id in part.redis.scan_iter(match=part.job_id("*"))]
        if not ids:
            continue  # (an MGET of no key is no command a cluster can route)
        jobs = await part.jobs(part.job_key_from_id(job_id.decode()) for job_id in ids)
        count += len([job for job in jobs if job is not None and job.function == CONSUME_TASK])
    return count


class GreetV1(Payload):
    name: str


class GreetV2(Payload):
    first_name: str
    last_name: str


class AlwaysFails(Payload):
    n: int


def _poison(marker: str) -> list[dict[str, Any]]:
    """Messages that are no valid envelope, each carrying `marker`."""
    return [
        {"body": f"not json {marker}"},
        {
            "body": json.dumps(
                {
                    "id": str(uuid.uuid4()),
                    "type": "nope.v1",
                    "payload": {},
                    "enqueued_at": "2026-01-01T00:00:00Z",
                    "m": marker,
                }
            )
        },
        {
            "body": json.dumps(
                {
                    "id": str(uuid.uuid4()),
                    "type": "webhook.deliver.v1",
                    "payload": {"deliveryId": "not-a-uuid"},
                    "enqueued_at": "2026-01-01T00:00:00Z",
                    "m": marker,
                }
            )
        },
        {
            "body": json.dumps(
                {
                    "id": str(uuid.uuid4()),
                    "type": "email.invitation.v1",
                    "payload": {},
                    "enqueued_at": "2026-01-01T00:00:00Z",
                }
            ),
            "extra": marker,
        },
        {"payload": marker},
    ]


async def test_poison_messages_are_recorded_acknowledged_and_never_reach_a_handler(
    jobs_world: Any, sessions: Sessions
) -> None:
    deliver_spy, invite_spy = Spy(), Spy()
    async with jobs_world() as world:
        world.host.deps.jobs.handlers["webhook.deliver.v1"] = deliver_spy.handler()
        world.host.deps.jobs.handlers["email.invitation.v1"] = invite_spy.handler()
        marker = uuid.uuid4().hex
        poison = _poison(marker)
        keys = []
        for kwargs in poison:
            key = f"poison-{uuid.uuid4()}"
            keys.append(key)
            await world.queue.enqueue(CONSUME_TASK, key=key, retries=5, **kwargs)
        jobs = [await world.finished(key) for key in keys]

    assert [(j.status, j.attempts) for j in jobs] == [(Status.COMPLETE, 1)] * len(poison)
    assert deliver_spy.calls == []
    assert invite_spy.calls == []
    rows = [row["RejectedJob"] for row in await sessions.all(select(RejectedJob))]
    mine = [r for r in rows if marker in r.body]
    assert len(mine) == len(poison)
    by_type = sorted(str(r.type) for r in mine)
    assert by_type == sorted(
        ["None", "nope.v1", "webhook.deliver.v1", "email.invitation.v1", "None"]
    )
    assert all(r.error and r.received_at for r in mine)


async def test_a_failing_handler_is_retried_on_the_exact_doubling_schedule(
    jobs_world: Any,
) -> None:
    spy = Spy(fail=True)
    async with jobs_world(
        {"test.fails.v1": (AlwaysFails, spy.handler())},
        job_retry_base_s=1,
        job_retry_max_s=4,
        job_max_attempts=5,
    ) as world:
        types = ENVELOPES.with_type("test.fails.v1", AlwaysFails)
        envelope = types.build("test.fails.v1", {"n": 1})
        await world.producer(types).send([envelope])
        job = await world.finished(str(envelope.id), timeout=40)

    assert job.status == Status.FAILED
    assert len(spy.calls) == 5
    times = [t for t, _ in spy.calls]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap, expected in zip(gaps, [1, 2, 4, 4], strict=True):
        # saq moves due jobs to the queue once a second: that is the polling slack
        assert expected - 0.05 <= gap <= expected + 1.5, gaps
    assert len(spy.given_up) == 1
    assert "failing on purpose (5)" in spy.given_up[0][1]


async def test_the_type_is_the_version_seam_v1_drains_beside_v2(jobs_world: Any) -> None:
    v1_spy, v2_spy = Spy(), Spy()
    old = ENVELOPES.with_type("test.greet.v1", GreetV1)
    new = old.with_type("test.greet.v2", GreetV2)
    async with jobs_world(
        {
            "test.greet.v1": (GreetV1, v1_spy.handler()),
            "test.greet.v2": (GreetV2, v2_spy.handler()),
        },
    ) as world:
        in_flight = [old.build("test.greet.v1", {"name": f"n{i}"}) for i in range(3)]
        await world.producer(old).send(in_flight)  # queued by the old deployment
        fresh = [
            new.build("test.greet.v2", {"firstName": f"f{i}", "lastName": "x"}) for i in range(3)
        ]
        await world.producer(new).send(fresh)
        for envelope in [*in_flight, *fresh]:
            assert (await world.finished(str(envelope.id))).status == Status.COMPLETE

    assert sorted(p.name for _, p in v1_spy.calls) == ["n0", "n1", "n2"]
    assert sorted(p.first_name for _, p in v2_spy.calls) == ["f0", "f1", "f2"]
    with pytest.raises(InvalidJob):  # a v1 payload is not a v2 payload: no silent reshaping
        new.build("test.greet.v2", {"name": "n"})


async def test_the_producer_refuses_a_malformed_job_where_it_is_queued(
    jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    async with jobs_world() as world:
        wired = sessions.wired(jobs=world.producer(ENVELOPES))
        with pytest.raises(InvalidJob, match="unknown job type"):
            async with wired.unit(tenant.id) as uow:
                uow.enqueue("webhook.deliver.v9", {"deliveryId": str(uuid.uuid4())})
        with pytest.raises(InvalidJob, match=r"invalid webhook\.deliver\.v1 payload"):
            async with wired.unit(tenant.id) as uow:
                uow.enqueue("webhook.deliver.v1", {"deliveryId": 42})
        assert await consume_jobs(world.queue) == 0


async def test_jobs_are_sent_only_after_the_commit_and_dropped_on_rollback(
    jobs_world: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    spy = Spy()
    async with jobs_world({"test.greet.v1": (GreetV1, spy.handler())}) as world:
        types = ENVELOPES.with_type("test.greet.v1", GreetV1)
        wired = sessions.wired(jobs=world.producer(types))

        async def failing_request() -> None:
            async with wired.unit(tenant.id) as uow:
                uow.enqueue("test.greet.v1", {"name": "rolled back"})
                raise RuntimeError("the request fails after queuing")

        with pytest.raises(RuntimeError, match="after queuing"):
            await failing_request()
        assert await consume_jobs(world.queue) == 0

        seen_in_unit = -1
        async with wired.unit(tenant.id) as uow:
            uow.enqueue("test.greet.v1", {"name": "committed"})
            seen_in_unit = await consume_jobs(world.queue)  # not sent yet
        (envelope,) = [e for e, _, _ in uow._jobs]
        assert (await world.finished(str(envelope.id))).status == Status.COMPLETE
    assert seen_in_unit == 0
    assert [p.name for _, p in spy.calls] == ["committed"]


def test_envelope_types_and_handlers_agree() -> None:
    from outlive.jobs.handlers import HANDLERS

    assert set(HANDLERS) == set(ENVELOPES.payloads)
    assert all(name.rsplit(".", 1)[-1].startswith("v") for name in ENVELOPES.payloads)
    assert isinstance(ENVELOPES, EnvelopeTypes)
