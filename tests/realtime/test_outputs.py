"""`runOutput`: a run's partial output from a cursor on, then live, then complete; resumable
without a chunk lost or repeated; another tenant's run is an error and nothing else."""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from outlive.agents.demo import stream_text
from outlive.realtime.outputs import OutputStore, output_key
from tests.realtime.clients import Served, Socket
from tests.support import Api, Servers, TenantHandle

OUTPUT = """subscription($id: ID!, $after: String) {
  runOutput(id: $id, after: $after) { runId stream cursor text done } }"""


async def subscribe_output(sock: Socket, run_id: str, after: str | None = None) -> None:
    await sock.send(
        {
            "type": "subscribe",
            "id": "out",
            "payload": {"query": OUTPUT, "variables": {"id": run_id, "after": after}},
        }
    )


async def next_chunk(sock: Socket, timeout: float = 30) -> dict[str, Any] | None:
    """The next chunk; None once the subscription completed."""
    message = json.loads(await sock.next_frame(timeout))
    if message["type"] == "complete":
        return None
    assert message["type"] == "next", message
    chunk: dict[str, Any] = message["payload"]["data"]["runOutput"]
    return chunk


async def read_all(sock: Socket) -> list[dict[str, Any]]:
    chunks = []
    while (chunk := await next_chunk(sock)) is not None:
        chunks.append(chunk)
    return chunks


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["text"] for c in chunks)


async def test_run_output_sends_each_turns_stream_then_completes_when_the_run_settles(
    served: Served, http: Api, tenant: TenantHandle, worker: Any
) -> None:
    run = (
        await http.start_run(
            tenant.token,
            input={"turns": 2, "delayMs": 0, "streamChars": 200, "streamDelayMs": 5},
        )
    )["run"]
    async with Socket.open(served.url, token=tenant.token) as sock:
        await subscribe_output(sock, run["id"])
        chunks = await read_all(sock)

    assert text_of(chunks) == stream_text(1, 200) + stream_text(2, 200)
    assert [c["done"] for c in chunks].count(True) == 2  # one per turn: each ends with its step
    assert chunks[-1]["done"] is True
    assert {c["stream"] for c in chunks} == {"answer"}
    assert {c["runId"] for c in chunks} == {run["id"]}
    settled = await http.run(tenant.token, run["id"], events=True)
    assert settled is not None
    assert settled["status"] == "SUCCEEDED"  # complete came after the run settled
    assert "turn 1" not in json.dumps(settled["events"])  # display only: never journaled
    # what each turn streamed is what its step recorded (`RunStep.result`): the truth
    steps = await http.gql(
        "query($id: ID!) { run(id: $id) { steps { seq result } } }",
        {"id": run["id"]},
        token=tenant.token,
    )
    assert [s["result"] for s in steps["run"]["steps"]] == [
        stream_text(1, 200),
        stream_text(2, 200),
    ]


async def test_a_reader_that_reconnects_with_its_cursor_loses_no_chunk_and_repeats_none(
    served: Served, http: Api, tenant: TenantHandle, worker: Any
) -> None:
    chars = 600
    run = (
        await http.start_run(
            tenant.token,
            input={"turns": 2, "delayMs": 0, "streamChars": chars, "streamDelayMs": 10},
        )
    )["run"]
    received: list[dict[str, Any]] = []
    cursor: str | None = None
    drops = 0
    while True:
        async with Socket.open(served.url, token=tenant.token) as sock:
            await subscribe_output(sock, run["id"], cursor)
            chunk = await next_chunk(sock)
            if chunk is None:
                break
            received.append(chunk)
            if drops < 8:  # drop the socket mid-stream, right after a chunk
                drops += 1
                cursor = chunk["cursor"]
                continue
            received.extend(await read_all(sock))
            break

    cursors = [c["cursor"] for c in received]
    assert drops == 8
    assert len(cursors) == len(set(cursors))  # none twice
    assert text_of(received) == stream_text(1, chars) + stream_text(2, chars)  # none missing


async def test_another_tenants_run_output_gets_an_error_and_nothing_else(
    served: Served, http: Api, tenant: TenantHandle, other_tenant: TenantHandle, worker: Any
) -> None:
    run = (
        await http.start_run(
            tenant.token, input={"turns": 1, "delayMs": 0, "streamChars": 50, "streamDelayMs": 0}
        )
    )["run"]
    async with Socket.open(served.url, token=other_tenant.token) as sock:
        await subscribe_output(sock, run["id"])
        message = json.loads(await sock.next_frame())
        await sock.send({"type": "ping"})
        after = []
        while (frame := json.loads(await sock.next_frame()))["type"] != "pong":
            after.append(frame["type"])

    assert message["type"] == "next", message  # graphql-transport-ws: an execution error
    assert message["payload"]["data"] is None
    assert message["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert after == ["complete"]  # and nothing else, before or after it


async def test_a_run_keeps_at_most_its_byte_bound_of_output_newest_first(servers: Servers) -> None:
    redis = Redis.from_url(servers.redis_url)
    store = OutputStore(redis, max_bytes=4096, keep_s=600)
    try:
        for i in range(100):
            await store.append("r1", [("answer", f"{i:04d}" + "x" * 96, False)])
        kept = await store.read_after("r1", None)
        ttl = await redis.pttl(output_key("r1"))
    finally:
        await redis.aclose()

    assert sum(len(c.text) + len(c.stream) + 32 for c in kept) <= 4096
    assert kept[-1].text.startswith("0099")  # the oldest went first
    assert kept[0].text > "0000"
    assert 0 < ttl <= 600_000  # kept for keep_s after the last write


async def test_a_reader_that_comes_after_the_run_settled_gets_everything_still_kept(
    served: Served, http: Api, tenant: TenantHandle, worker: Any
) -> None:
    run = (
        await http.start_run(
            tenant.token, input={"turns": 1, "delayMs": 0, "streamChars": 100, "streamDelayMs": 0}
        )
    )["run"]
    async with Socket.open(served.url, token=tenant.token) as sock:
        await subscribe_output(sock, run["id"])
        await read_all(sock)  # completes once the run settled
    async with Socket.open(served.url, token=tenant.token) as late:
        await subscribe_output(late, run["id"])
        chunks = await read_all(late)

    assert text_of(chunks) == stream_text(1, 100)
    assert chunks[-1]["done"] is True
