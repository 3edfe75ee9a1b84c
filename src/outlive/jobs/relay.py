"""The relay in a worker: when to make a pass (`outlive.services.relay` says what a pass does).

A pass is made when PostgreSQL announces that a row became due now (LISTEN `outlive_relay`: a
trigger NOTIFYs it when a hand-off failed, or when the queue lost its data), and every
`OUTLIVE_RELAY_SCAN_S` as the backstop (a process killed between its commit and its enqueue, a
missed dispatch), and when the earliest timer of a WAITING run is due (a run that parks NOTIFYs
too, so a timer set earlier than the one slept for is not missed). A pass that took a whole
batch is followed by another at once. While the queue is unreachable the loop retries on its
own, a quarter of a second and doubling up to 2 s, so the work is handed within seconds of Redis
coming back; it listens to nothing meanwhile.

Beside the passes, it hands again the runs whose worker process is gone (`Relay.hand_orphans`):
the moment the worker it watches dies (`outlive.db.liveness.DeathWatch`: a wait for that
worker's liveness lock, which PostgreSQL grants when its session ends), and every
`OUTLIVE_LIVENESS_CHECK_S` for the others. That is how a SIGKILLed worker's runs go on within
milliseconds instead of a lease and a sweep.

Behind PgBouncer in transaction mode LISTEN cannot work, so the loop only scans there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

import asyncpg
from redis.asyncio import Redis
from redis.exceptions import RedisError
from saq.queue.redis import RedisQueue

from outlive.config import Settings
from outlive.db import primary
from outlive.db.liveness import DeathWatch
from outlive.db.ports import REAL_TIME, Admission, TimeSource
from outlive.db.tx import Sessions
from outlive.errors import QueueUnavailable
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.run_instances import SaqRunInstances
from outlive.services import sealing
from outlive.services.relay import CHANNEL, QUEUE_TIMEOUT_S, Relay
from outlive.services.relay.lead import WakeLead
from outlive.services.schedules.fires import fire_due
from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

MARKER_KEY = "outlive:queue-marker"
BACKOFF_MIN_S = 0.25
BACKOFF_MAX_S = 2.0
TIMER_SLACK_S = 0.005  # a pass for a timer starts just after it is due (PostgreSQL's clock)


class RedisQueueMarker:
    """The queue's marker: a key that only a loss of the queue's data removes. A queue spread
    over partitions has one in each partition's slot (`marker_keys`): on a cluster, the loss of
    any master's data (a master restarted empty, with no replica to take over) is seen."""

    def __init__(self, redis: Redis, *, timeout_s: float, keys: Sequence[str] = (MARKER_KEY,)):
        self._redis = redis
        self._timeout_s = timeout_s
        self._keys = list(keys)  # each cell's own (`marker_keys`): each cell's relay hands its own

    async def renew(self) -> bool:
        try:
            async with asyncio.timeout(self._timeout_s):
                if len(self._keys) == 1:
                    return bool(await self._redis.set(self._keys[0], "1", nx=True))
                async with self._redis.pipeline(transaction=False) as pipe:
                    for key in self._keys:
                        pipe.set(key, "1", nx=True)
                    created = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            raise QueueUnavailable(f"the queue is unreachable: {exc!r}") from exc
        return any(created)


def marker_keys(base: str, *queues: RedisQueue) -> list[str]:
    """`base` (`MARKER_KEY`, of the cell: `Settings.of_cell`) for queues of one partition each on
    one Redis (as always); else a key in each partition's slot (its name is a hash tag)."""
    parts = [p for q in queues for p in getattr(q, "partitions", (q,))]
    if not any("{" in p.name for p in parts):
        return [base]
    return [f"{base}:{p.name}" for p in parts]


class RelayLoop:
    def __init__(
        self,
        relay: Relay,
        *,
        scan_s: float,
        listen_url: str | None,
        orphans_s: float | None = None,
        deaths: DeathWatch | None = None,
    ) -> None:
        self.relay = relay
        self._orphans_s = orphans_s  # None: this worker looks for no gone worker's runs
        self._deaths = deaths  # None: it looks every `orphans_s` only
        self._orphans = Daemon("outlive-orphans", self.watch_orphans)
        self.scan_s = scan_s
        self._listen_url = listen_url
        self._listener: asyncpg.Connection | None = None
        self._wake = asyncio.Event()
        self._daemon = Daemon("outlive-relay", self.run)
        self.passes = 0

    def start(self) -> None:
        self._daemon.start()
        if self._orphans_s is not None:
            self._orphans.start()

    async def stop(self) -> None:
        for daemon in (self._orphans, self._daemon):
            await daemon.stop()
        if self._deaths is not None:
            await self._deaths.stop()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = BACKOFF_MIN_S
        next_scan = loop.time()
        while True:
            scan = loop.time() >= next_scan
            if scan:
                next_scan = loop.time() + self.scan_s
                await self._listen()
            self._wake.clear()  # a row made due during the pass makes the next one start at once
            try:
                done = await self.relay.run_pass(scan=scan)
            except QueueUnavailable as exc:
                if backoff == BACKOFF_MIN_S:
                    log.warning("relay: %s; retrying until it is back", exc.message)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                next_scan = loop.time()  # once it is back, scan for what was missed meanwhile
                continue
            except Exception as exc:  # noqa: BLE001 (PostgreSQL away: the next scan tries again)
                log.warning("relay pass failed (%r); next scan in %ss", exc, self.scan_s)
                await asyncio.sleep(self.scan_s)
                continue
            if backoff > BACKOFF_MIN_S:
                log.info("relay: the queue is back")
            backoff = BACKOFF_MIN_S
            self.passes += 1
            if done.full:
                await asyncio.sleep(0)
                continue
            until = next_scan - loop.time()
            if done.next_wake_s is not None:  # the earliest timer, however far the next scan
                until = min(until, done.next_wake_s + TIMER_SLACK_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, until)):
                    await self._wake.wait()

    async def watch_orphans(self) -> None:
        """Hand again the runs whose worker process is gone (`Relay.hand_orphans`: one statement
        when there are none): as soon as a watched worker dies (`DeathWatch`), and at the latest
        every `OUTLIVE_LIVENESS_CHECK_S` (a worker alone, once per its watch's look, which says
        whether there is anything to find). The first look is at once: a worker restarted in
        place (one process, SIGKILLed) finds its predecessor's runs as soon as it is up."""
        assert self._orphans_s is not None  # noqa: S101 (started only with a period)
        while True:
            try:
                if self._deaths is None or self._deaths.may_have_orphans():
                    await self.relay.hand_orphans()
            except Exception as exc:  # noqa: BLE001 (PostgreSQL or the queue away: next time)
                log.debug("relay: cannot look for a gone worker's runs (%r)", exc)
            if self._deaths is None:
                await asyncio.sleep(self._orphans_s)
            else:
                await self._deaths.death(within=self._orphans_s)

    async def _listen(self) -> None:
        """(Re)connect the LISTEN connection when it is missing; a failure only means waking up
        on the scan alone until the next try."""
        if self._listen_url is None:
            return
        if self._listener is not None and not self._listener.is_closed():
            return
        try:
            self._listener = await primary.connect(
                self._listen_url, server_settings={"application_name": "outlive-relay"}
            )
            await self._listener.add_listener(CHANNEL, self._notified)
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("relay: cannot LISTEN (%r); scanning every %ss", exc, self.scan_s)
            self._listener = None

    def _notified(self, *_: Any) -> None:
        self._wake.set()


def build_relay(
    settings: Settings,
    sessions: Sessions,
    redis: Redis,
    *,
    runs_queue: RedisQueue,
    jobs_queue: RedisQueue,
    database_url: str,
    admission: Admission,
    lead: WakeLead,
    deaths: DeathWatch | None = None,
    time: TimeSource = REAL_TIME,
) -> RelayLoop:
    """The relay a worker runs (started with `start()`, stopped with `stop()`), making up for
    missed dispatches through `admission` (the runtime's), handing sleeps back `lead` early
    (the worker's, which its attempts teach)."""
    relaxed = settings.model_copy(update={"queue_timeout_s": QUEUE_TIMEOUT_S})
    relay = Relay(
        sessions,
        SaqRunInstances(runs_queue, relaxed),
        SaqJobProducer(jobs_queue, relaxed),
        RedisQueueMarker(
            redis,
            timeout_s=QUEUE_TIMEOUT_S,
            keys=marker_keys(settings.of_cell(MARKER_KEY), runs_queue, jobs_queue),
        ),
        batch=settings.relay_batch,
        recheck_s=settings.relay_recheck_s,
        default_runs_cap=settings.tenant_max_running_runs,
        default_jobs_cap=settings.tenant_max_inflight_jobs,
        admission=admission,
        lead=lead,
        fire=partial(fire_due, kek=sealing.kek_of(settings), time=time),  # sealed as startRun's
        time=time,  # the schedules' (a test harness's fake clock; else the real time)
    )
    listen_url = None if settings.db_pgbouncer else database_url
    return RelayLoop(
        relay,
        scan_s=settings.relay_scan_s,
        listen_url=listen_url,
        orphans_s=settings.liveness_check_s,
        deaths=deaths,
    )
