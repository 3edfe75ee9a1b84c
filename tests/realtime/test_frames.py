"""The shared-frame path sends just what strawberry would, and encodes a nudge once per tenant."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from outlive.config import Settings
from outlive.realtime.nudges import Nudge
from outlive.realtime.registry import MAX_CLOSE_REASON_BYTES, close_reason
from outlive.realtime.sockets import (
    PlainSelection,
    _plain_selection,
    next_frame,
    plain_selection,
    shared_encoding,
)
from tests.conftest import make_settings
from tests.realtime.clients import PLAIN, Served, Socket, publisher, serve
from tests.support import Servers, TenantHandle

# (plain document, operationName, the same selection strawberry must execute itself)
SELECTIONS = [
    (
        "subscription { nudges { type tenantId at id } }",
        None,
        "subscription { nudges { type @include(if: true) tenantId at id } }",
    ),
    (
        "subscription Nudges { nudges { id at type } }",
        "Nudges",
        "subscription Nudges { nudges { id @skip(if: false) at type } }",
    ),
    (
        "subscription { n: nudges { __typename kind: type id } }",
        None,
        "subscription { n: nudges { __typename kind: type @include(if: true) id } }",
    ),
    (
        "subscription{nudges{at}}",
        None,
        "subscription { ...F } fragment F on Subscription { nudges { at } }",
    ),
]


@pytest.mark.parametrize(("plain", "name", "executed"), SELECTIONS)
async def test_a_shared_frame_is_byte_for_byte_what_strawberry_sends(
    served: Served,
    settings: Settings,
    tenant: TenantHandle,
    plain: str,
    name: str | None,
    executed: str,
) -> None:
    assert plain_selection(plain, name) is not None
    assert plain_selection(executed, name) is None
    nudges = [
        Nudge("run.updated", tenant.id, datetime.now(UTC), uuid.uuid4()),
        Nudge("invitation.updated", tenant.id, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), None),
    ]
    async with (
        Socket.open(served.url, token=tenant.token) as shared,
        Socket.open(served.url, token=tenant.token) as strawberry,
        publisher(settings) as pub,
    ):
        await shared.subscribe(plain, id="op-7", operation_name=name)
        await strawberry.subscribe(executed, id="op-7", operation_name=name)
        await served.subscribers(2)
        await pub.send(nudges)
        for _ in nudges:
            assert await shared.next_frame() == await strawberry.next_frame()


@pytest.mark.parametrize(
    "query",
    [
        "subscription { nudges { type } nudges { id } }",  # two root fields: strawberry refuses
        "subscription { nudges { type type } }",  # merged by GraphQL: strawberry's business
        "subscription { nudges { type(x: 1) } }",
        "subscription($v: Boolean!) { nudges { type } }",
        "query { viewer { user { id } } }",
        "subscription { nudges { nope } }",
        "subscription { nudges }",
        "subscription A { nudges { type } } subscription B { nudges { id } }",
        "not graphql",
    ],
)
def test_anything_but_a_plain_selection_is_left_to_strawberry(query: str) -> None:
    assert plain_selection(query, None) is None


def test_an_operation_name_must_match() -> None:
    assert plain_selection("subscription A { nudges { type } }", "A") is not None
    assert plain_selection("subscription A { nudges { type } }", "B") is None
    assert plain_selection("subscription { nudges { type } }", "A") is None


async def test_errors_still_come_from_strawberry(served: Served, tenant: TenantHandle) -> None:
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.send(
            {
                "type": "subscribe",
                "id": "1",
                "payload": {"query": "subscription { nudges { nope } }"},
            }
        )
        error = await sock.receive()
    assert error["type"] == "error"
    assert "nope" in error["payload"][0]["message"]


async def test_a_nudge_is_encoded_once_for_all_the_sockets_of_its_tenant(
    served: Served,
    settings: Settings,
    tenant: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[Nudge] = []
    original: Callable[[PlainSelection, Nudge], str] = PlainSelection.encode

    def counting(self: PlainSelection, nudge: Nudge) -> str:
        encoded.append(nudge)
        return original(self, nudge)

    monkeypatch.setattr(PlainSelection, "encode", counting)
    nudge = Nudge("run.created", tenant.id, datetime.now(UTC), uuid.uuid4())
    sockets: list[Any] = []
    async with publisher(settings) as pub:
        opened = [Socket.open(served.url, token=tenant.token) for _ in range(5)]
        for manager in opened:
            sock = await manager.__aenter__()
            sockets.append((manager, sock))
            await sock.subscribe()
        try:
            await served.subscribers(5)
            await pub.send([nudge])
            frames = {await sock.next_frame() for _, sock in sockets}
        finally:
            for manager, _ in sockets:
                await manager.__aexit__(None, None, None)
    assert len(frames) == 1
    assert encoded == [nudge]


# --- malformed messages: a 4400 close or an `error` frame, never a dropped connection ----------


@pytest.mark.parametrize("raw", ["null", "1", "[]", '""', '{"type": 5}'])
async def test_a_message_that_is_not_an_object_closes_with_4400(
    served: Served, tenant: TenantHandle, caplog: pytest.LogCaptureFixture, raw: str
) -> None:
    """The fuzzer's R7: strawberry indexed the message and raised a TypeError (1006)."""
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.ws.send(raw)
        code, _ = await sock.closed()
    assert code == 4400
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize(
    "message",
    [
        {"id": "1", "type": "subscribe", "payload": []},
        {"id": "1", "type": "subscribe", "payload": None},
        {"id": "1", "type": "subscribe"},
        {"id": ["1"], "type": "subscribe", "payload": {"query": PLAIN}},
        {"id": "1", "type": "subscribe", "payload": {"query": 5}},
        {"id": "1", "type": "subscribe", "payload": {"query": PLAIN, "variables": []}},
        {"id": "1", "type": "subscribe", "payload": {"query": PLAIN, "operationName": 5}},
    ],
)
async def test_a_subscribe_of_the_wrong_shape_closes_with_4400(
    served: Served, tenant: TenantHandle, caplog: pytest.LogCaptureFixture, message: Any
) -> None:
    """The fuzzer's R8."""
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.send(message)
        code, _ = await sock.closed()
    assert code == 4400
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_syntax_error_is_an_error_frame(
    served: Served, tenant: TenantHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """The fuzzer's R9: a syntax error got only `complete` and an "Exception in worker task"."""
    async with Socket.open(served.url, token=tenant.token) as sock:
        broken = "subscription { nudges { type } } " + "x" * 300  # a long "Unexpected Name"
        await sock.send({"type": "subscribe", "id": "1", "payload": {"query": broken}})
        error = await sock.receive()
        assert error["type"] == "error"
        assert error["id"] == "1"
        assert error["payload"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
        await sock.subscribe(id="1")  # the id is free again, the socket still open
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_close_reason_fits_in_a_control_frame(
    served: Served, tenant: TenantHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """The fuzzer's R10: a duplicate subscribe with a 300-character id made a 4409 reason longer
    than a close frame carries."""
    long_id = "é" * 300
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.subscribe(id=long_id)
        await sock.send({"type": "subscribe", "id": long_id, "payload": {"query": PLAIN}})
        code, reason = await sock.closed()
    assert code == 4409
    assert reason.startswith("Subscriber for é")
    assert len(reason.encode()) <= 123
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_close_reasons_are_cut_on_a_character_boundary() -> None:
    assert close_reason("short") == "short"
    cut = close_reason("€" * 100)
    assert len(cut.encode()) <= MAX_CLOSE_REASON_BYTES
    assert cut.endswith("...")
    assert cut.rstrip(".") == "€" * len(cut.rstrip("."))


async def test_a_subscription_over_the_byte_limit_is_refused_before_any_cache(
    servers: Servers, tenant: TenantHandle
) -> None:
    """Issue 19, Medium 2, on the socket: a document over OUTLIVE_MAX_QUERY_BYTES closes the
    socket before strawberry parses it or `plain_selection` caches it."""
    _plain_selection.cache_clear()
    settings = make_settings(servers, max_query_bytes=1024)
    async with serve(settings) as served, Socket.open(served.url, token=tenant.token) as sock:
        padded = PLAIN + " #" + "x" * 1100
        await sock.send({"type": "subscribe", "id": "1", "payload": {"query": padded}})
        code, reason = await sock.closed()
    assert code == 4400
    assert "1024 bytes" in reason
    assert _plain_selection.cache_info().currsize == 0


async def test_an_empty_selection_set_is_an_error_frame(
    served: Served, tenant: TenantHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by tests/fuzz: strawberry's depth limiter failed on `{ }` (graphql-core 3.3 parses
    it)."""
    async with Socket.open(served.url, token=tenant.token) as sock:
        query = "subscription { nudges { } }"
        await sock.send({"type": "subscribe", "id": "1", "payload": {"query": query}})
        error = await sock.receive()
    assert error["type"] == "error"
    assert error["payload"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize(
    "message",
    [
        {"type": "complete", "id": ["1"]},
        {"type": "complete", "id": {}},
        {"type": "complete"},
        {"type": "ping", "payload": [1]},
        {"type": "pong", "payload": "x"},
    ],
)
async def test_a_complete_or_ping_of_the_wrong_shape_closes_with_4400(
    served: Served, tenant: TenantHandle, caplog: pytest.LogCaptureFixture, message: Any
) -> None:
    """Found by tests/fuzz: `complete` with a list for its id raised a TypeError (1006)."""
    async with Socket.open(served.url, token=tenant.token) as sock:
        await sock.send(message)
        code, _ = await sock.closed()
    assert code == 4400
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("operation_id", ["1", "out", 'é"\\\n', "x" * 200])
def test_a_shared_next_frame_is_byte_for_byte_strawberrys(operation_id: str) -> None:
    """A `runOutput` chunk's data is encoded once for its readers (`shared_encoding`), each frame
    around it with its own id: the same bytes as strawberry's `json.dumps` of the message."""
    data = {"runOutput": {"cursor": "1-0", "text": 'a "quoted" é\n\u2028 text', "done": False}}
    encode = strawberry_view_encoding()
    shared = shared_encoding(data, encode)
    assert shared is not None
    assert shared_encoding(data, lambda _: "never called") == shared  # kept for this result
    message = {"id": operation_id, "type": "next", "payload": {"data": data}}
    assert next_frame(operation_id, shared) == encode(message)


def strawberry_view_encoding() -> Callable[[object], str]:
    from strawberry.http.base import BaseView

    def encode(data: object) -> str:
        text = BaseView.encode_json(cast(Any, None), data)
        assert isinstance(text, str)
        return text

    return encode
