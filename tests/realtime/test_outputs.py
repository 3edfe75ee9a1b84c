"""`runOutput`: a run's partial output from a cursor on, then live, then complete; resumable
without a chunk lost or repeated; another tenant's run is an error and nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from redis.asyncio import Redis

from outlive.agents.demo import stream_text
from outlive.errors import ServiceUnavailable
from outlive.jobs.redis import create_redis
from outlive.realtime.outputs import BACKLOG_READS, Chunk, OutputStore, OutputTails, output_key
from outlive.worker import WorkerHost
from outlive.workflows.streams import StreamWriter
from tests.conftest import make_settings
from tests.realtime.clients import Served, Socket, private_redis, serve
from tests.support import Api, Servers, TenantHandle

OUTPUT = """subscription($id: ID!, $after: String) {
  runOutput(id: $id, after: $after) { runId stream cursor text done } }"""


DROPS = 20  # issue 30: "check it over 20 drops"


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
    # 1,000 characters a turn, 10 every 10 ms in batches of about 50 ms: about 20 chunks a turn,
    # so the 20 drops fall in both turns' streams (a drop right after each of 20 chunks)
    chars = 1000
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
            if drops < DROPS:  # drop the socket mid-stream, right after a chunk
                drops += 1
                cursor = chunk["cursor"]
                continue
            received.extend(await read_all(sock))
            break

    cursors = [c["cursor"] for c in received]
    assert drops == DROPS
    assert len(cursors) == len(set(cursors))  # none twice
    assert text_of(received) == stream_text(1, chars) + stream_text(2, chars)  # none missing


async def test_another_tenants_run_output_gets_an_error_and_nothing_else(
    served: Served, http: Api, tenant: TenantHandle, other_tenant: TenantHandle, worker: Any
) -> None:
    run = (
        await http.start_run(
            tenant.token, input={"turns": 1, "delayMs": 0, "streamChars": 300, "streamDelayMs": 10}
        )
    )["run"]
    async with (
        Socket.open(served.url, token=tenant.token) as own,
        Socket.open(served.url, token=other_tenant.token) as sock,
    ):
        await subscribe_output(own, run["id"])
        first = await next_chunk(own)  # the process follows the run now, for its tenant
        assert first is not None
        await subscribe_output(sock, run["id"])
        message = json.loads(await sock.next_frame())
        await sock.send({"type": "ping"})
        after = []
        while (frame := json.loads(await sock.next_frame()))["type"] != "pong":
            after.append(frame["type"])
        own_text = text_of([first, *await read_all(own)])

    assert message["type"] == "next", message  # graphql-transport-ws: an execution error
    assert message["payload"]["data"] is None
    assert message["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert after == ["complete"]  # and nothing else, before or after it
    assert own_text == stream_text(1, 300)  # while the run's own tenant read on


async def test_a_run_keeps_at_most_its_byte_bound_of_output_newest_first(servers: Servers) -> None:
    redis = create_redis(servers.redis_url)
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


async def test_chunks_written_while_the_settled_question_is_out_reach_every_reader_live(
    servers: Servers,
) -> None:
    """The tail asks PostgreSQL whether the run settled; with 500 sockets subscribing that answer
    took 24 s in bench/streams.py, and the run settled meanwhile. Every chunk written before the
    answer reaches every reader, and live chunks do not wait for the answer."""
    redis = create_redis(servers.redis_url)
    tails = OutputTails(OutputStore(redis, max_bytes=1 << 20, keep_s=60))
    run_id = f"tail-{uuid.uuid4()}"
    asked, answered = asyncio.Event(), asyncio.Event()

    async def settled() -> bool:  # PostgreSQL busy: the answer comes when the test says so
        asked.set()
        await answered.wait()
        return True  # the run settled while the question was out

    got: list[list[str]] = [[] for _ in range(50)]
    first_live = [asyncio.Event() for _ in got]

    async def read(i: int) -> None:
        async for chunk in tails.follow(run_id, None, settled):
            got[i].append(chunk.text)
            if chunk.text == "live ":
                first_live[i].set()

    async def every_reader_has_it() -> None:
        for event in first_live:
            await event.wait()

    try:
        await tails.store.append(run_id, [("answer", "kept ", False)])
        readers = [asyncio.create_task(read(i)) for i in range(len(got))]
        await asyncio.wait_for(asked.wait(), 10)
        await tails.store.append(run_id, [("answer", "live ", False)])
        live = asyncio.create_task(every_reader_has_it())
        done, _ = await asyncio.wait({live}, timeout=5)  # before the answer came?
        live_before_answer = bool(done)
        live.cancel()
        await tails.store.append(run_id, [("answer", "last", False), ("answer", "", True)])
        answered.set()  # the last chunks and the answer came together: no quiet second between
        async with asyncio.timeout(10):
            await asyncio.gather(*readers)
    finally:
        await redis.delete(output_key(run_id))
        await redis.aclose()

    assert {"".join(texts) for texts in got} == {"kept live last"}  # none lost, none twice
    assert live_before_answer  # live chunks did not wait for PostgreSQL
    assert len(tails) == 0  # the tail ended with its readers


READERS = 200


async def test_many_readers_of_one_run_each_get_its_whole_text_once(
    servers: Servers, tenant: TenantHandle
) -> None:
    """Issue 30: readers of one run keep up. The sockets sign in first, then subscribe at once
    while the run writes the last tenth of its stream: the first subscribe starts the process's
    tail for the run, whose question whether the run settled waits behind the other subscribes'
    PostgreSQL reads, and the run settles meanwhile (each reader used to lose that last tenth).
    The worker shares the test's loop with 200 sockets: its heartbeat is given room, so that a
    starved loop does not have the run retried (a retried step writes its stream again)."""
    chars = 1500
    settings = make_settings(servers, run_heartbeat_s=30)
    async with contextlib.AsyncExitStack() as stack:
        served = await stack.enter_async_context(serve(settings))
        host = WorkerHost(settings, concurrency=8)
        await host.start()
        stack.push_async_callback(host.stop)
        http = Api(
            await stack.enter_async_context(httpx.AsyncClient(base_url=served.url, timeout=30))
        )
        sockets = [
            await stack.enter_async_context(Socket.open(served.url, token=tenant.token))
            for _ in range(READERS)
        ]
        run = (
            await http.start_run(
                tenant.token,
                input={"turns": 1, "delayMs": 0, "streamChars": chars, "streamDelayMs": 5},
            )
        )["run"]
        await streaming(served, run["id"], chars * 9 // 10)  # its last tenth to come
        await asyncio.gather(*(subscribe_output(sock, run["id"]) for sock in sockets))
        results = await asyncio.gather(*(read_all(sock) for sock in sockets))

    expected = stream_text(1, chars)
    texts = [text_of(chunks) for chunks in results]
    assert sum(text == expected for text in texts) == READERS, sorted(map(len, texts))[:5]
    for chunks in results:
        cursors = [c["cursor"] for c in chunks]
        assert len(cursors) == len(set(cursors))  # none twice
        assert chunks[-1]["done"] is True


def events_counted(result: str) -> float:
    """`outlive_graphql_shared_events_total{result}` in this process."""
    labels = {"result": result}
    return REGISTRY.get_sample_value("outlive_graphql_shared_events_total", labels) or 0.0


def documents_counted(cache: str) -> float:
    """`outlive_graphql_documents_total{cache}` in this process (the served app's)."""
    return REGISTRY.get_sample_value("outlive_graphql_documents_total", {"cache": cache}) or 0.0


async def test_readers_with_one_document_share_its_preparation_and_each_chunks_execution(
    served: Served, http: Api, tenant: TenantHandle, worker: Any
) -> None:
    """The socket's subscriptions come from the document cache HTTP uses: 20 readers of one run
    subscribing with one document (new to the process: its own comment) make one miss, parsed
    and validated, and 19 hits; a chunk sent to several of them is executed once; each reader
    still gets the whole text once."""
    readers = 20
    document = f"# readers {uuid.uuid4()}\n{OUTPUT}"
    run = (
        await http.start_run(
            tenant.token,
            input={"turns": 1, "delayMs": 0, "streamChars": 300, "streamDelayMs": 5},
        )
    )["run"]
    misses, hits = documents_counted("miss"), documents_counted("hit")
    executed, shared = events_counted("executed"), events_counted("shared")
    async with contextlib.AsyncExitStack() as stack:
        sockets = [
            await stack.enter_async_context(Socket.open(served.url, token=tenant.token))
            for _ in range(readers)
        ]
        for sock in sockets:
            await sock.send(
                {
                    "type": "subscribe",
                    "id": "out",
                    "payload": {"query": document, "variables": {"id": run["id"]}},
                }
            )
        results = await asyncio.gather(*(read_all(sock) for sock in sockets))

    assert documents_counted("miss") - misses == 1
    assert documents_counted("hit") - hits == readers - 1
    assert [text_of(chunks) for chunks in results] == [stream_text(1, 300)] * readers
    # and each chunk is executed once for the readers that got it: a reader that was behind got
    # its own joined chunk, executed for it alone
    sent = [tuple(sorted(c.items())) for chunks in results for c in chunks]
    assert events_counted("executed") - executed == len(set(sent))
    assert events_counted("shared") - shared == len(sent) - len(set(sent)) > 0


async def test_a_subscription_over_the_input_limits_gets_an_error_frame(
    served: Served, tenant: TenantHandle
) -> None:
    """The socket applies HTTP's limits before executing: variables nested deeper than
    `OUTLIVE_MAX_JSON_DEPTH` (unused ones too) are BAD_USER_INPUT, in an `error` frame."""
    deep: Any = "x"
    for _ in range(served.app.state.runtime.settings.max_json_depth + 1):
        deep = [deep]
    async with Socket.open(served.url, token=tenant.token) as sock:
        variables = {"id": str(uuid.uuid4()), "deep": deep}
        await sock.send(
            {"type": "subscribe", "id": "out", "payload": {"query": OUTPUT, "variables": variables}}
        )
        frame = json.loads(await sock.next_frame())
    assert frame["type"] == "error", frame
    assert [e["extensions"]["code"] for e in frame["payload"]] == ["BAD_USER_INPUT"]
    assert "nest deeper" in frame["payload"][0]["message"]


async def streaming(served: Served, run_id: str, chars: int) -> None:
    """Until the run's stream in Redis holds at least `chars` characters."""
    redis: Redis = served.app.state.runtime.require_queues().redis
    cursor, written = "0-0", 0
    while written < chars:
        found = await redis.xread({output_key(run_id): cursor}, block=30_000)
        assert found, "the run's stream stalled"
        for entry_id, fields in found[0][1]:
            cursor, written = entry_id, written + len(fields[b"t"])


async def test_a_reader_that_is_behind_gets_what_waits_joined_and_resumes_after_it(
    servers: Servers,
) -> None:
    redis = create_redis(servers.redis_url)
    tails = OutputTails(OutputStore(redis, max_bytes=1 << 20, keep_s=60))
    run_id = f"tail-{uuid.uuid4()}"
    has_settled = False

    async def settled() -> bool:
        return has_settled

    async def read_all_of(after: str | None) -> list[Chunk]:
        return [chunk async for chunk in tails.follow(run_id, after, settled)]

    try:
        await tails.store.append(run_id, [("answer", "0 ", False)])
        slow = tails.follow(run_id, None, settled)
        first = await anext(slow)  # then it reads nothing while 50 batches come
        keeping_up = asyncio.create_task(read_all_of(None))
        for i in range(1, 51):
            await tails.store.append(run_id, [("answer", f"{i} ", False)])
        await tails.store.append(run_id, [("answer", "", True)])
        has_settled = True
        async with asyncio.timeout(10):
            await keeping_up  # every batch was handed to every reader of the tail
            rest = [chunk async for chunk in slow]
            resumed = await read_all_of(first.cursor)
    finally:
        await redis.delete(output_key(run_id))
        await redis.aclose()

    whole = "".join(f"{i} " for i in range(51))
    assert "".join(c.text for c in keeping_up.result()) == whole
    assert first.text + "".join(c.text for c in rest) == whole
    assert [c.done for c in rest] == [True]  # the 50 batches and the end waited: one frame
    assert "".join(c.text for c in resumed) == whole.removeprefix("0 ")  # after `first`


async def test_readers_that_subscribe_together_share_one_lookup_of_the_run(
    servers: Servers,
) -> None:
    redis = create_redis(servers.redis_url)
    tails = OutputTails(OutputStore(redis, max_bytes=1 << 20, keep_s=60))
    asked: list[str] = []
    answer = asyncio.Event()

    def lookup_for(owner: str) -> Any:
        async def lookup() -> bool:
            asked.append(owner)
            await answer.wait()
            return owner == "tenant-a"  # the run is tenant-a's

        return lookup

    try:
        waits = [tails.owned("r1", "tenant-a", lookup_for("tenant-a")) for _ in range(50)]
        waits += [tails.owned("r1", "tenant-b", lookup_for("tenant-b")) for _ in range(50)]
        pending = asyncio.gather(*waits)
        answer.set()
        async with asyncio.timeout(10):
            answers = await pending
    finally:
        await redis.aclose()

    assert sorted(asked) == ["tenant-a", "tenant-b"]  # one lookup per run and tenant
    assert answers == [True] * 50 + [False] * 50  # another tenant's answer is its own


async def test_readers_joining_together_read_their_backlogs_on_a_few_redis_connections() -> None:
    async with private_redis() as server:
        redis = Redis.from_url(server.url)
        tails = OutputTails(OutputStore(redis, max_bytes=1 << 20, keep_s=60))
        has_settled = False

        async def settled() -> bool:
            return has_settled

        async def read() -> str:
            return "".join([chunk.text async for chunk in tails.follow("r1", None, settled)])

        try:
            for i in range(20):
                await tails.store.append("r1", [("answer", f"{i} ", False)])
            await tails.store.append("r1", [("answer", "", True)])
            has_settled = True
            async with asyncio.timeout(30):
                texts = await asyncio.gather(*(read() for _ in range(200)))
            clients = await redis.client_list(_type="normal")
        finally:
            await redis.aclose()

    assert set(texts) == {"".join(f"{i} " for i in range(20))}
    assert len(clients) <= BACKLOG_READS + 3  # + the tail's, its first look, this test's own


async def test_a_reader_whose_redis_is_gone_gets_service_unavailable() -> None:
    async with private_redis() as server:
        redis = Redis.from_url(server.url, socket_connect_timeout=1)
        tails = OutputTails(OutputStore(redis, max_bytes=1 << 20, keep_s=60))

        async def settled() -> bool:
            return False

        try:
            await tails.store.append("r1", [("answer", "kept", False)])
            server.kill()
            await server.process.wait()
            async with asyncio.timeout(30):
                with pytest.raises(ServiceUnavailable) as raised:
                    async for _ in tails.follow("r1", None, settled):
                        pass
        finally:
            await redis.aclose()

    assert raised.value.code == "SERVICE_UNAVAILABLE"  # resubscribe later, with `after`
    assert len(tails) == 0


@pytest.mark.parametrize(
    "after",
    [
        "9999999999999999999-99999999999999999999",  # each half past 64 bits
        "18446744073709551615-18446744073709551615",  # the last id: nothing can follow it
        "not-a-cursor",
    ],
)
async def test_a_cursor_no_entry_can_have_is_bad_user_input_not_unavailable(
    served: Served, http: Api, tenant: TenantHandle, after: str
) -> None:
    """Issue 39, I2: clients retry SERVICE_UNAVAILABLE for ever; a bad cursor is their error."""
    run = (await http.start_run(tenant.token, input={"turns": 1, "delayMs": 600_000}))["run"]
    async with Socket.open(served.url, token=tenant.token) as sock:
        await subscribe_output(sock, run["id"], after=after)
        frame = json.loads(await sock.next_frame())
    errors = frame["payload"] if frame["type"] == "error" else frame["payload"]["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], frame


async def test_a_stream_an_abandoned_attempt_left_open_is_reset_before_the_next_attempts_text(
    servers: Servers,
) -> None:
    """Issue 40 (round five, F7): a worker killed mid-reply left its stream open; the next
    attempt's first chunk of that stream goes after a reset, so a reader that drops what the
    stream showed at a reset shows the new attempt's text once, never both."""
    redis = create_redis(servers.redis_url)
    store = OutputStore(redis, max_bytes=1 << 20, keep_s=60)
    run_id = f"reset-{uuid.uuid4()}"
    try:
        dead = StreamWriter(store, run_id, "answer", batch_s=0.001, attempt=1)
        dead.write("The refund of 4")  # the worker dies here: no `done`
        await dead._send(done=False)
        live = StreamWriter(store, run_id, "answer", batch_s=0.001, attempt=2)
        live.write("The refund of 42.00 is done.")
        live.restart()  # a call made again inside the step: its own reset
        live.write("The refund of 42.00 is done.")
        await live.close()
        again = StreamWriter(store, run_id, "answer", batch_s=0.001, attempt=2)
        again.write("Anything else?")  # the same attempt's next step: no reset
        await again.close()
        chunks = await store.read_after(run_id, None)
        tails = OutputTails(store)

        async def settled() -> bool:
            return True

        followed = [c async for c in tails.follow(run_id, None, settled)]
    finally:
        await redis.aclose()

    assert [(c.attempt, c.reset, c.text, c.done) for c in chunks] == [
        (1, False, "The refund of 4", False),
        (2, True, "", False),  # before attempt 2's first text
        (2, False, "The refund of 42.00 is done.", False),
        (2, True, "", False),  # restart()
        (2, False, "The refund of 42.00 is done.", False),
        (2, False, "", True),
        (2, False, "Anything else?", False),
        (2, False, "", True),
    ]
    assert [c.reset for c in followed] == [False, True, False, True, False, False]  # joined
    shown = ""  # what a UI that drops a stream's text at a reset shows
    for chunk in followed:
        shown = "" if chunk.reset else shown + chunk.text
    assert shown == "The refund of 42.00 is done.Anything else?"
