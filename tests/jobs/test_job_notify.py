"""saq's job-status pub/sub (`OutliveRedisQueue.notify`): a job's end is published, so saq's waits
(`Job.refresh(until_complete=...)`) still wake; its start and its heartbeats are not (one PUBLISH
round trip less for every run)."""

from __future__ import annotations

from redis.asyncio import Redis
from saq.job import Status

from outlive.config import Settings
from outlive.jobs.queues import create_queue


async def test_only_a_jobs_end_is_published(settings: Settings) -> None:
    url = settings.redis_url or ""
    queue = create_queue(url, "notify-q")
    listener = Redis.from_url(url)
    pubsub = listener.pubsub()
    try:
        job = await queue.enqueue("noop", key="notify-1")
        assert job is not None
        await pubsub.subscribe(job.id)
        assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"  # type: ignore[index]
        await job.update(status=Status.ACTIVE)  # what saq's worker does as a job starts
        await job.update()  # a heartbeat
        await job.finish(Status.COMPLETE)
        heard = []
        while message := await pubsub.get_message(ignore_subscribe_messages=True, timeout=5):
            heard.append(message["data"].decode())
            if heard[-1] == Status.COMPLETE:
                break
        # Messages arrive in the order they were published: a start or a heartbeat would have
        # come before the end.
        assert heard == [Status.COMPLETE]
    finally:
        await pubsub.aclose()
        await listener.aclose()
        await queue.disconnect()
