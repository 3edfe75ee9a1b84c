"""Benchmark: what a stream costs a run, and whether 500 readers of one run keep up.

    uv run python bench/streams.py [--pairs 8] [--readers 500]

One `outlive api` and one `outlive worker` on a fresh database and Redis db.

1. Overhead. `--pairs` pairs of `demo` runs, alternating: `{turns: 1, delayMs: 500}` (the floor,
   in the same run) and the same with `streamChars: 10000, streamDelayMs: 0` (1,000 writes of 10
   characters, batched to Redis, then the stream's `done`). Duration = the row's `finishedAt -
   startedAt`. Reported: the medians and the added share. Target: at most +10%.
2. Readers. One run streams 5,000 characters (500 chunks, one per 5 ms) while N WebSocket
   clients read `runOutput` from the start; then the same with 1 reader (the floor). Each reader
   must get the whole text once. Lag = when a reader got a Redis entry minus when Redis stored
   it (its id's milliseconds; one machine, one clock), for every entry of the run and every
   reader: a reader that is behind gets what waits joined into one chunk (docs/streams.md), and
   each entry in it counts from its own store time, not from the newest one's (the chunk's
   cursor). Reported: p50 / p99 lag and the time from the run settling to the last reader's
   `complete`.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Env, bench_env, free_port, outlive, table, wait_http

SUBSCRIBED: list[tuple[float, float, int]] = []
OUTPUT = """subscription($id: ID!) { runOutput(id: $id) { cursor text done } }"""
RUN = "query($id: ID!) { run(id: $id) { status startedAt finishedAt } }"
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"


async def make_token(env: Env) -> str:
    from outlive.db.engine import create_engine, create_sessions
    from outlive.services.tenants import create_token

    engine = create_engine(env.database_url)
    async with create_sessions(engine).unit() as uow:
        _, token = await create_token(uow, tenant_slug="bench-streams", email="b@bench.test")
    await engine.dispose()
    return token


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.http = httpx.AsyncClient(base_url=url, timeout=60)

    async def gql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(
            "/graphql",
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        data: dict[str, Any] = body["data"]
        return data

    async def start(self, input: dict[str, Any]) -> str:
        data = await self.gql(START, {"i": {"agent": "demo", "input": input}})
        run_id: str = data["startRun"]["run"]["id"]
        return run_id

    async def settled(self, run_id: str) -> dict[str, Any]:
        while True:
            run: dict[str, Any] = (await self.gql(RUN, {"id": run_id}))["run"]
            if run["status"] not in ("QUEUED", "RUNNING", "WAITING"):
                return run
            await asyncio.sleep(0.05)


def duration(run: dict[str, Any]) -> float:
    started = datetime.fromisoformat(run["startedAt"])
    return (datetime.fromisoformat(run["finishedAt"]) - started).total_seconds()


async def overhead(client: Client, pairs: int) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    streamed: list[float] = []
    base = {"turns": 1, "delayMs": 500}
    for _ in range(pairs):
        for sink, extra in ((plain, {}), (streamed, {"streamChars": 10_000, "streamDelayMs": 0})):
            run = await client.settled(await client.start({**base, **extra}))
            if run["status"] != "SUCCEEDED":
                raise RuntimeError(f"a run did not succeed: {run}")
            sink.append(duration(run))
    return plain, streamed


def cursor_key(cursor: str) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq)


async def read(
    url: str, token: str, run_id: str, ready: asyncio.Event
) -> tuple[str, list[tuple[tuple[int, int], float]], float]:
    """(text, (cursor, when it came) of each chunk, when it completed) for one reader."""
    ws_url = url.replace("http://", "ws://") + "/graphql"
    got: list[tuple[tuple[int, int], float]] = []
    text: list[str] = []
    async with connect(
        ws_url,
        subprotocols=[Subprotocol("graphql-transport-ws")],
        open_timeout=60,
        ping_interval=None,
    ) as ws:
        await ws.send(
            json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {token}"}})
        )
        await ws.recv()
        await ready.wait()
        subscribed = time.time()
        await ws.send(
            json.dumps(
                {
                    "type": "subscribe",
                    "id": "1",
                    "payload": {"query": OUTPUT, "variables": {"id": run_id}},
                }
            )
        )
        while True:
            message = json.loads(await ws.recv())
            now = time.time()
            if message["type"] == "complete":
                SUBSCRIBED.append((subscribed, now, len(text)))
                return "".join(text), got, now
            if message.get("payload", {}).get("errors"):
                raise RuntimeError(f"a reader got an error: {message['payload']['errors']}")
            chunk = message["payload"]["data"]["runOutput"]
            got.append((cursor_key(chunk["cursor"]), now))
            text.append(chunk["text"])


def entry_lags(
    entries: list[tuple[int, int]], got: list[tuple[tuple[int, int], float]]
) -> list[float]:
    """Each entry's lag for one reader: it came with the first chunk whose cursor is at or past
    its id (a chunk is the entries after the previous chunk's cursor, up to its own)."""
    cursors = [cursor for cursor, _ in got]
    lags = []
    for entry in entries:
        at = bisect.bisect_left(cursors, entry)
        if at < len(got):
            lags.append(got[at][1] - entry[0] / 1000)
    return lags


async def stored(redis_url: str, run_id: str) -> list[tuple[int, int]]:
    """The ids of the run's output entries, oldest first."""
    from outlive.realtime.outputs import output_key

    redis = Redis.from_url(redis_url)
    try:
        entries = await redis.xrange(output_key(run_id))
    finally:
        await redis.aclose()
    return [cursor_key(entry_id.decode()) for entry_id, _ in entries]


async def readers(client: Client, count: int, redis_url: str) -> dict[str, float]:
    from outlive.agents.demo import stream_text

    # the run waits for its readers: a 3 s turn delay before its stream begins
    run_id = await client.start(
        {"turns": 1, "delayMs": 3000, "streamChars": 5000, "streamDelayMs": 5}
    )
    ready = asyncio.Event()
    tasks = [
        asyncio.create_task(read(client.url, client.token, run_id, ready)) for _ in range(count)
    ]
    await asyncio.sleep(0.5)
    ready.set()
    results = await asyncio.gather(*tasks)
    run = await client.settled(run_id)
    expected = stream_text(1, 5000)
    fin = datetime.fromisoformat(run["finishedAt"]).timestamp()
    bad = [(len(text), round(done - fin, 2)) for text, _, done in results if text != expected]
    if bad:
        subs = sorted((round(a - fin, 2), round(b - fin, 2), n) for a, b, n in SUBSCRIBED)
        print(subs[:5], subs[200:205], subs[-5:], file=sys.stderr)
        print(len(bad), "bad of", len(results), len(expected), bad[:3], file=sys.stderr)
        raise RuntimeError("a reader missed or repeated a chunk")
    entries = await stored(redis_url, run_id)
    lags = sorted(lag for _, got, _ in results for lag in entry_lags(entries, got))
    finished = datetime.fromisoformat(run["finishedAt"]).timestamp()
    return {
        "p50_ms": lags[len(lags) // 2] * 1000,
        "p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000,
        "complete_after_settle_s": max(done for _, _, done in results) - finished,
    }


async def main(args: argparse.Namespace) -> None:
    async with bench_env() as env:
        token = await make_token(env)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with (
            outlive("api", "--port", str(port), env=env.vars(), log=args.log_dir / "api.log"),
            outlive("worker", "--concurrency", "4", env=env.vars(), log=args.log_dir / "w.log"),
        ):
            await wait_http(url + "/healthz", timeout=120)
            client = Client(url, token)
            plain, streamed = await overhead(client, args.pairs)
            many = await readers(client, args.readers, env.redis_url)
            one = await readers(client, 1, env.redis_url)
            await client.http.aclose()
    p, s = statistics.median(plain), statistics.median(streamed)
    print(
        table(
            [
                ["streamChars 0 (floor)", f"{p * 1000:.0f}"],
                ["streamChars 10000", f"{s * 1000:.0f}"],
                ["added", f"{(s / p - 1) * 100:+.1f}%"],
            ],
            [f"demo run, median of {args.pairs}", "duration ms"],
        )
    )
    print()
    print(
        table(
            [
                [
                    f"{n} reader(s)",
                    f"{f['p50_ms']:.0f}",
                    f"{f['p99_ms']:.0f}",
                    f"{f['complete_after_settle_s']:.2f}",
                ]
                for n, f in ((1, one), (args.readers, many))
            ],
            ["readers of one run", "lag p50 ms", "lag p99 ms", "last complete after settle s"],
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--readers", type=int, default=500)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))  # noqa: S108 (the logs)
    asyncio.run(main(parser.parse_args()))
