"""Benchmark: how many nudges each API process receives from Redis, by subscription routing.

    uv run python bench/routing.py [--processes 8] [--tenants 2000] [--nudges 10000]

P hub processes and T tenants, each tenant's sockets on one process (tenant i on process i mod P).
The parent publishes N nudges (tenants drawn uniformly, with `Publisher.send` in pipelines of 100)
and each process counts the messages Redis sent it and the deliveries its subscribers got. Three
routings in the same run, one after the other, each on a channel prefix of its own:

- `pattern` (the floor: how every process listened before): one `PSUBSCRIBE <prefix>*` per
  process, dispatched by the same `Hub.dispatch`: every process receives every nudge;
- `tenant`: the hub as it runs now, a `SUBSCRIBE` per served tenant (`Hub.add` subscribes the
  tenant's channel with its first subscriber);
- `sharded`: the same with sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`) on the one Redis (skipped
  on a Redis older than 7).

The processes are light: each runs the real `Hub` (and its Redis links) and one hub subscriber per
served tenant (what a socket registers; a task per subscriber drains it), without uvicorn, the
database or the sockets themselves: routing is the hub's, and starting 8 full API processes with
2,000 tenants' sockets would measure the sockets, not the routing. "missed" counts nudges of a
process's own tenants its subscribers did not get within 30 s. "cpu ms" is each process's CPU
time from before the first publish to the last delivery.

Target (the issue): each process receives only its own tenants' nudges, about 1/P of the
pattern routing's, with 0 missed. Needs Redis (BENCH_REDIS_URL; default the local one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BASE_REDIS, Child, table
from redis.asyncio import Redis

from outlive.realtime.hub import Hub, Subscriber
from outlive.realtime.links import Sharded
from outlive.realtime.nudges import Nudge, Publisher

REDIS_URL = f"{BASE_REDIS.rstrip('/')}/14"
PIPELINE = 100
COLLECT_TIMEOUT_S = 30.0


# --- a hub process (this file, `--child`) --------------------------------------------------------


class HubProcess:
    """One process: the hub (or the pattern floor) and a drained subscriber per served tenant."""

    def __init__(self, mode: str, prefix: str, tenants: list[uuid.UUID]) -> None:
        self.mode, self.prefix, self.tenants = mode, prefix, tenants
        self.redis = Redis.from_url(REDIS_URL)
        sharded = Sharded(REDIS_URL, Redis.from_url) if mode == "sharded" else None
        # The floor's hub subscribes to nothing itself (nudges=False): a pattern does it all.
        self.hub = Hub(self.redis, prefix=prefix, nudges=mode != "pattern", sharded=sharded)
        self.pattern_received = 0
        self.delivered = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._pattern: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def start(self) -> None:
        await self.hub.start()
        if self.mode == "pattern":
            ready = asyncio.get_running_loop().create_future()
            self._pattern = asyncio.create_task(self._listen_pattern(ready))
            await ready
        for tenant in self.tenants:
            subscriber = self.hub.add(tenant)
            self._tasks.append(asyncio.create_task(self._drain(subscriber)))
        if self.mode != "pattern":
            for tenant in self.tenants:
                if not await self.hub.heard(tenant, wait_s=30):
                    raise RuntimeError(f"tenant {tenant} not subscribed")

    async def _listen_pattern(self, ready: asyncio.Future[None]) -> None:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.psubscribe(f"{self.prefix}*")
        ready.set_result(None)
        while True:
            message = await pubsub.get_message(timeout=30)
            if message is not None and message["type"] == "pmessage":
                self._heard()
                self.hub.dispatch(message["channel"].decode(), message["data"])

    async def _drain(self, subscriber: Subscriber) -> None:
        while True:
            await subscriber.next()
            self.delivered += 1
            self._changed.set()

    def _heard(self) -> None:
        self.pattern_received += 1
        self._changed.set()

    @property
    def received(self) -> int:
        return self.pattern_received if self.mode == "pattern" else self.hub.received

    async def collect(self, expected: int, total: int) -> dict[str, Any]:
        """Wait until the own tenants' nudges are delivered and, with a pattern (which hears
        every nudge), until all `total` have arrived, so the count is not cut short."""
        arrived = total if self.mode == "pattern" else expected
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(COLLECT_TIMEOUT_S):
                while self.delivered < expected or self.received < arrived:
                    self._changed.clear()
                    await self._changed.wait()
        return {
            "received": self.received,
            "delivered": self.delivered,
            "missed": max(0, expected - self.delivered),
            "cpu_s": time.process_time(),
        }


async def child() -> None:
    """Commands on stdin, one JSON object a line; a JSON reply on stdout for each."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    process: HubProcess | None = None
    while line := await reader.readline():
        command = json.loads(line)
        if command["op"] == "start":
            tenants = [uuid.UUID(t) for t in command["tenants"]]
            process = HubProcess(command["mode"], command["prefix"], tenants)
            await process.start()
            reply: dict[str, Any] = {"ok": True, "cpu_s": time.process_time()}
        else:
            assert process is not None  # noqa: S101 (started first)
            reply = await process.collect(command["expected"], command["total"])
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


# --- the bench -----------------------------------------------------------------------------------


async def one_routing(
    mode: str, processes: int, tenants: list[uuid.UUID], nudges: int, seed: int
) -> list[dict[str, Any]]:
    prefix = f"bench:routing:{mode}:{uuid.uuid4().hex[:8]}:"
    served = [tenants[i::processes] for i in range(processes)]
    owner = {t: i for i, mine in enumerate(served) for t in mine}
    redis = Redis.from_url(REDIS_URL)
    sharded = None
    if mode == "sharded":
        sharded = Sharded(REDIS_URL, Redis.from_url)
        await sharded.discover()
    publisher = Publisher(redis, prefix=prefix, sharded=sharded)
    try:
        async with contextlib.AsyncExitStack() as stack:
            children = [
                await stack.enter_async_context(Child.running(__file__, "--child")) for _ in served
            ]
            started = await asyncio.gather(
                *(
                    c.call(op="start", mode=mode, prefix=prefix, tenants=[str(t) for t in mine])
                    for c, mine in zip(children, served, strict=True)
                )
            )
            draw = random.Random(seed)  # the same nudges for every routing
            batch = [
                Nudge("run.updated", draw.choice(tenants), datetime.now(UTC), uuid.uuid4())
                for _ in range(nudges)
            ]
            expected = [0] * processes
            for nudge in batch:
                expected[owner[nudge.tenant_id]] += 1
            for start in range(0, nudges, PIPELINE):
                await publisher.send(batch[start : start + PIPELINE])
            if publisher.failures:
                raise RuntimeError(f"{mode}: {publisher.failures} publish failures")
            replies = await asyncio.gather(
                *(
                    c.call(op="collect", expected=e, total=nudges)
                    for c, e in zip(children, expected, strict=True)
                )
            )
    finally:
        if sharded is not None:
            await sharded.aclose()
        await redis.aclose()
    for reply, before, own in zip(replies, started, expected, strict=True):
        reply["own"] = own
        reply["cpu_ms"] = (reply["cpu_s"] - before["cpu_s"]) * 1000
    return replies


async def redis_major() -> int:
    redis = Redis.from_url(REDIS_URL)
    try:
        return int(str((await redis.info("server"))["redis_version"]).split(".")[0])
    finally:
        await redis.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--tenants", type=int, default=2000)
    parser.add_argument("--nudges", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    draw = random.Random(args.seed)
    tenants = [uuid.UUID(int=draw.getrandbits(128), version=4) for _ in range(args.tenants)]
    modes = ["pattern", "tenant"] + (["sharded"] if await redis_major() >= 7 else [])
    results = {
        m: await one_routing(m, args.processes, tenants, args.nudges, args.seed) for m in modes
    }
    rows = []
    for i in range(args.processes):
        row: list[Any] = [i, results["tenant"][i]["own"]]
        for mode in modes:
            reply = results[mode][i]
            row += [reply["received"], reply["missed"], f"{reply['cpu_ms']:.0f}"]
        rows.append(row)
    header = ["process", "own nudges"]
    for mode in modes:
        header += [f"{mode} received", f"{mode} missed", f"{mode} cpu ms"]
    print(
        f"nudge routing: {args.processes} hub processes, {args.tenants} tenants (each on one "
        f"process), {args.nudges} nudges; messages each process received from Redis"
    )
    print(table(rows, header))
    print("\n".join(verdict(results, modes, args.processes)))


def verdict(
    results: dict[str, list[dict[str, Any]]], modes: list[str], processes: int
) -> list[str]:
    floor = results["pattern"]
    lines = []
    for mode in modes[1:]:
        replies = results[mode]
        shares = [r["received"] / f["received"] for r, f in zip(replies, floor, strict=True)]
        only_own = all(r["received"] == r["own"] for r in replies)
        missed = sum(r["missed"] for r in replies)
        cpu = statistics.median(r["cpu_ms"] for r in replies)
        floor_cpu = statistics.median(f["cpu_ms"] for f in floor)
        lines.append(
            f"{mode}: each process received {min(shares):.3f}-{max(shares):.3f} of the pattern "
            f"floor's messages (1/{processes} = {1 / processes:.3f}); only its own tenants': "
            f"{'ok' if only_own else 'NO'}; missed {missed} ({'ok' if missed == 0 else 'MISSED'})"
            f"; median cpu {cpu:.0f} ms vs the floor's {floor_cpu:.0f} ms"
        )
    floor_missed = sum(f["missed"] for f in floor)
    lines.append(f"pattern floor: missed {floor_missed}")
    return lines


if __name__ == "__main__":
    if "--child" in sys.argv:
        asyncio.run(child())
    else:
        asyncio.run(main())
