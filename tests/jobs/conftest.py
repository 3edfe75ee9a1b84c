"""Fixtures for the jobs queue: a worker with extra (test) envelope types, and the queue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import pytest
from saq.job import Job
from saq.queue import Queue

from outlive.config import Settings
from outlive.jobs.envelopes import ENVELOPES, EnvelopeTypes, Payload
from outlive.jobs.handlers import Handler
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.queues import JOBS_QUEUE, create_queue
from outlive.worker import WorkerHost
from tests.conftest import make_settings, with_own_database
from tests.support import Servers


@pytest.fixture
async def servers(servers: Servers) -> Servers:
    """Every test here runs on a database of its own (see `with_own_database`)."""
    return await with_own_database(servers)


@dataclass
class Spy:
    """A handler that records what it was called with, and when."""

    fail: bool = False
    calls: list[tuple[float, Any]] = field(default_factory=list)
    given_up: list[tuple[Any, str]] = field(default_factory=list)

    async def handle(self, deps: Any, payload: Any) -> None:
        self.calls.append((time.monotonic(), payload))
        if self.fail:
            raise RuntimeError(f"failing on purpose ({len(self.calls)})")

    async def give_up(self, deps: Any, payload: Any, error: str) -> None:
        self.given_up.append((payload, error))

    def handler(self) -> Handler:
        return Handler(self.handle, self.give_up)


@dataclass
class JobsWorld:
    host: WorkerHost
    queue: Queue
    settings: Settings

    def producer(self, types: EnvelopeTypes) -> SaqJobProducer:
        return SaqJobProducer(self.queue, self.settings, types)

    async def finished(self, key: str, timeout: float = 30) -> Job:
        """Wait on saq's job-status pub/sub until the job is terminal. saq reads the job before it
        subscribes, so a status set in between is missed: each wait is short, and the job is read
        again after it."""
        async with asyncio.timeout(timeout):
            while True:
                job = await self.queue.job(key)
                assert job is not None, f"no job {key}"
                if job.completed:
                    return job
                with suppress(TimeoutError):
                    await job.refresh(until_complete=1)


JobsFactory = Callable[..., Awaitable[JobsWorld]]


@pytest.fixture
async def jobs_world(servers: Servers) -> AsyncIterator[Callable[..., Any]]:
    hosts: list[WorkerHost] = []
    queues: list[Queue] = []

    @asynccontextmanager
    async def start(
        extra: dict[str, tuple[type[Payload], Handler]] | None = None, **overrides: Any
    ) -> AsyncIterator[JobsWorld]:
        settings = make_settings(servers, **overrides)
        host = WorkerHost(settings, concurrency=2, jobs_concurrency=4)
        await host.start()
        hosts.append(host)
        assert host.deps is not None
        # The host imports its agents' modules in a thread once started; the first time in a
        # process that held its loop for 0.2-0.6 s, past an enqueue's 0.5 s deadline. A test of
        # the jobs times them from a warm host.
        await host.deps.workflows.agents.warm_up()
        types = ENVELOPES
        for name, (payload, handler) in (extra or {}).items():
            types = types.with_type(name, payload)
            host.deps.jobs.handlers[name] = handler
        host.deps.jobs.types = types
        queue = create_queue(settings.redis_url or "", JOBS_QUEUE)
        queues.append(queue)
        yield JobsWorld(host=host, queue=queue, settings=settings)

    yield start
    for host in hosts:
        await host.stop()
    for queue in queues:
        await queue.disconnect()
