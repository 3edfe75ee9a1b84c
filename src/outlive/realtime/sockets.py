"""The WebSocket transport: the graphql-transport-ws handler that serves the sockets of one API
process (their registry, caps and revocation: `realtime/registry.py`).

**The handler.** `NudgesTransportWS` is strawberry's graphql-transport-ws handler with the plain
`nudges` subscription (`subscription { nudges { type tenantId at id } }`, in any order, with
aliases or `__typename`, see `plain_selection`) answered without per-subscriber execution: a frame
whose payload every socket of the tenant shares, encoded once per nudge (`Delivery.encoded`),
byte for byte what strawberry sends for that selection (tests/realtime compare them). Any other
document (fragments, directives, variables, several operations) is strawberry's, executed per
subscriber by the `nudges` resolver (`resolvers/nudges.py`). Both register with the hub when
the `subscribe` message is handled (or when the resolver starts), wait until the tenant's Redis
subscription is confirmed (the hub subscribes per served tenant), and unregister on every way
out: `complete`, a client's close, a dropped connection, a server close.

The socket carries subscriptions only (queries and mutations go over HTTP, where the body limit,
rate limits and coalescing apply). Its token is re-checked on every `subscribe` (4403 once it
stopped working); the registry closes it sooner on a revocation or at expiry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, TypeGuard, cast

from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    parse,
)
from starlette.websockets import WebSocketDisconnect
from strawberry.asgi import ASGIWebSocketAdapter
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    ConnectionInitMessage,
    SubscribeMessage,
)
from strawberry.types.graphql import OperationType as StrawberryOperation

from outlive.errors import ServiceUnavailable
from outlive.realtime.nudges import Nudge as NudgeRecord
from outlive.realtime.registry import (
    CLOSE_FORBIDDEN,
    TooManySockets,
    close_reason,
)
from outlive.realtime.subscribers import (
    CLOSE_GONE,
    CLOSE_TRY_AGAIN,
    Delivery,
    Subscriber,
    SubscriberClosed,
)

log = logging.getLogger(__name__)

CLOSE_BAD_MESSAGE = 4400

MAX_PLAIN_FIELDS = 8
MAX_PLAIN_QUERY = 2000


class OutliveWebSocketAdapter(ASGIWebSocketAdapter):
    """Strawberry's adapter, with every close reason it is given cut by `close_reason`, and a
    `next` frame's data encoded once for every socket that sends that same result object."""

    async def close(self, code: int, reason: str) -> None:
        await super().close(code, close_reason(reason))

    async def send_json(self, message: Mapping[str, object]) -> None:
        """The frame strawberry would send, byte for byte; the `data` of a `next` frame that
        carries nothing else is encoded once per result (`shared_encoding`): readers of one run
        are handed one result per chunk (`graphql.events.SharedEvents`)."""
        payload = message.get("payload") if message.get("type") == "next" else None
        if not isinstance(payload, dict) or len(payload) != 1 or not payload.get("data"):
            await super().send_json(message)
            return
        data = shared_encoding(payload["data"], self.view.encode_json)
        if data is None:
            await super().send_json(message)
            return
        try:
            await self.ws.send_text(next_frame(message["id"], data))
        except WebSocketDisconnect as exc:
            raise WebSocketDisconnected from exc


def next_frame(operation_id: object, data: str) -> str:
    """A `next` frame with only `data` (already encoded), as strawberry's `json.dumps` writes it."""
    return f'{{"id":{json.dumps(operation_id)},"type":"next","payload":{{"data":{data}}}}}'


SHARED_ENCODINGS = 256  # the last results' encodings (each keeps its result alive: ids unique)
_encodings: OrderedDict[int, tuple[object, str]] = OrderedDict()


def shared_encoding(data: object, encode: Callable[[object], str | bytes]) -> str | None:
    """`encode(data)`, computed once per result object while it is among the last
    `SHARED_ENCODINGS` (None when it encodes to bytes: the caller encodes the whole frame)."""
    found = _encodings.get(id(data))
    if found is not None and found[0] is data:
        _encodings.move_to_end(id(data))
        return found[1]
    text = encode(data)
    if not isinstance(text, str):
        return None
    _encodings[id(data)] = (data, text)
    if len(_encodings) > SHARED_ENCODINGS:
        _encodings.popitem(last=False)
    return text


async def close_subscriber(websocket: Any, closed: SubscriberClosed) -> None:
    """Close a socket whose hub subscriber was closed (a stalled peer, the server stopping)."""
    with suppress(WebSocketDisconnect, RuntimeError, OSError):  # already gone
        await websocket.close(code=closed.code, reason=close_reason(closed.reason))


# --- the plain selection, encoded once -----------------------------------------------------------

_FIELDS: dict[str, Callable[[NudgeRecord], str | None]] = {
    "type": lambda n: n.type,
    "tenantId": lambda n: str(n.tenant_id),
    "at": lambda n: n.at.isoformat(),  # strawberry's DateTime serializes with isoformat()
    "id": lambda n: None if n.id is None else str(n.id),
    "__typename": lambda n: "Nudge",
}


@dataclass(frozen=True, slots=True)
class PlainSelection:
    """`subscription { <root_key>: nudges { <key>: <field> … } }`: nothing strawberry would need to
    execute. Hashable: it keys the shared encodings of each delivery."""

    root_key: str
    fields: tuple[tuple[str, str], ...]  # (response key, field name), in document order

    def encode(self, nudge: NudgeRecord) -> str:
        """The JSON of `data.<root_key>`, as strawberry's `json.dumps` would write it."""
        return json.dumps(
            {key: _FIELDS[name](nudge) for key, name in self.fields}, separators=(",", ":")
        )

    def frame_head(self, operation_id: object) -> str:
        """Everything of a `next` frame before the nudge object (`}}}` closes it)."""
        return (
            f'{{"id":{json.dumps(operation_id)},"type":"next","payload":{{"data":'
            f"{{{json.dumps(self.root_key)}:"
        )


def plain_selection(query: str, operation_name: str | None) -> PlainSelection | None:
    """The selection when the document is exactly one plain `nudges` subscription; otherwise None
    (strawberry then parses, validates and executes it, errors included). Only short documents
    reach the cache, so it holds at most 256 x `MAX_PLAIN_QUERY` characters."""
    if len(query) > MAX_PLAIN_QUERY:
        return None
    return _plain_selection(query, operation_name)


@lru_cache(maxsize=256)
def _plain_selection(query: str, operation_name: str | None) -> PlainSelection | None:
    try:
        document = parse(query, no_location=True, max_tokens=500)
    except GraphQLError:
        return None
    return _plain(document, operation_name)


def _plain(document: DocumentNode, operation_name: str | None) -> PlainSelection | None:
    if len(document.definitions) != 1:
        return None
    operation = document.definitions[0]
    if (
        not isinstance(operation, OperationDefinitionNode)
        or operation.operation is not OperationType.SUBSCRIPTION
        or operation.variable_definitions
        or operation.directives
        or len(operation.selection_set.selections) != 1
    ):
        return None
    name = operation.name.value if operation.name else None
    if operation_name is not None and name != operation_name:
        return None
    root = operation.selection_set.selections[0]
    if not _bare(root) or root.name.value != "nudges" or root.selection_set is None:
        return None
    fields: list[tuple[str, str]] = []
    for node in root.selection_set.selections:
        if not _bare(node) or node.name.value not in _FIELDS or node.selection_set is not None:
            return None
        fields.append(((node.alias or node.name).value, node.name.value))
    keys = {key for key, _ in fields}
    if not fields or len(fields) > MAX_PLAIN_FIELDS or len(keys) != len(fields):
        return None
    return PlainSelection(root_key=(root.alias or root.name).value, fields=tuple(fields))


def _bare(node: object) -> TypeGuard[FieldNode]:
    """A field without arguments or directives."""
    return isinstance(node, FieldNode) and not node.arguments and not node.directives


# --- the transport handler ----------------------------------------------------------------------


class NudgesTransportWS(BaseGraphQLTransportWSHandler[Any, None]):
    """strawberry's graphql-transport-ws handler, with the plain `nudges` subscription answered from
    shared, pre-encoded frames. Everything else (auth, limits, pings, errors) is strawberry's.
    Its context is `resolvers.context.Context` (typed `Any` here: this layer is below it); it uses
    `socket`, `token`, `principal` and `services.{sockets, hub, authenticate}`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast: dict[str, tuple[Subscriber, PlainSelection]] = {}
        self._closers: set[asyncio.Task[None]] | None = None  # made when first needed
        self.schema = cast(Any, SubscriptionsOnly(self.schema))

    async def handle_message(self, message: Any) -> None:
        """A message that is not an object, or one of the wrong shape, closes the socket with
        4400 (strawberry expects a well-formed dict and would raise a TypeError)."""
        problem = _message_problem(message, self.max_query_bytes)
        if problem is not None:
            await self.handle_invalid_message(problem)
            return
        await super().handle_message(cast(Any, message))

    @property
    def max_query_bytes(self) -> int:
        return int(self.context.services.settings.max_query_bytes)

    @staticmethod
    def _get_pre_execution_close_reason(error: GraphQLError) -> str | None:
        return None  # a syntax error is an `error` frame for its operation, as validation's

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        try:
            await super().handle_connection_init(message)
            if self.connection_acknowledged:
                _authenticated(self.websocket)
            if self.connection_acknowledged and self.connection_init_timeout_task is not None:
                # strawberry lets it sleep out the whole init timeout: a task, its frame and a
                # timer per socket for 10 s, for nothing once the connection is acknowledged.
                self.connection_init_timeout_task.cancel()
                self.connection_init_timeout_task = None
        except TooManySockets as exc:
            await self.websocket.close(code=CLOSE_TRY_AGAIN, reason=str(exc))
        except ServiceUnavailable as exc:  # the token cannot be checked now: not "forbidden"
            await self.websocket.close(code=CLOSE_TRY_AGAIN, reason=exc.message)

    async def shutdown(self) -> None:
        if self.context.socket is not None:  # first: its slot is free once it stops listening
            self.context.services.sockets.remove(self.context.socket)
            self.context.socket = None
        await super().shutdown()

    async def _token_still_works(self) -> bool:
        token = self.context.token
        if token is None:
            return True  # not acknowledged yet: strawberry refuses the subscribe with 4401
        try:
            if await self.context.services.authenticate(token) is not None:
                return True
        except ServiceUnavailable as exc:  # the token cannot be checked now: come back later
            await self.websocket.close(code=CLOSE_TRY_AGAIN, reason=exc.message)
            return False
        await self.websocket.close(code=CLOSE_FORBIDDEN, reason="token revoked or expired")
        return False

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        if not await self._token_still_works():
            return
        before = self.operations.get(message["id"])
        await super().handle_subscribe(message)
        operation = self.operations.get(message["id"])
        if operation is None or operation is before or operation.task is None:
            return  # refused (limit, duplicate id, not acknowledged)
        hub, principal = self.context.services.hub, self.context.principal
        if hub is None or principal is None or not isinstance(operation.variables, dict | None):
            return
        if getattr(principal, "run_id", None) is not None:  # a run read token: the resolver's
            return
        selection = plain_selection(operation.query, operation.operation_name)
        if selection is None:
            return
        # The task has not started yet: registering here, and waiting until Redis confirmed the
        # tenant's subscription (the first socket of a tenant in this process subscribes), means
        # that nothing published after this message was handled is missed (a client may rely on
        # a ping sent after its subscribe: messages are handled one after the other).
        subscriber = hub.add(principal.tenant.id)
        self._fast[operation.id] = (subscriber, selection)  # until `cleanup_operation`
        operation.query = sys.intern(operation.query)  # one copy for every socket that sent it
        await hub.heard(principal.tenant.id)

    async def run_operation(self, operation: Operation[Any, None]) -> None:
        """The plain selection: attach the subscriber's sink and return (the hub sends each frame
        from its fan-out loop, `Subscriber.attach`); anything else is strawberry's."""
        fast = self._fast.get(operation.id)
        if fast is None:
            await super().run_operation(operation)  # refused there unless a subscription
            return
        subscriber, selection = fast
        websocket = self.websocket
        assert isinstance(websocket, ASGIWebSocketAdapter)  # noqa: S101 (the ASGI view's adapter)
        send_text = websocket.ws.send_text
        head = selection.frame_head(operation.id)

        def sink(delivery: Delivery) -> Coroutine[Any, Any, None]:
            return send_text(head + delivery.encoded(selection, selection.encode) + "}}}")

        subscriber.attach(sink, partial(self._subscriber_closed, websocket.ws))
        # This task ends here: strawberry keeps `operation.task` until the operation is cleaned
        # up (it cancels, then awaits it), and a finished task still holds ~0.8 KiB. A finished
        # future of this socket's stands in for it.
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        operation.task = cast(Any, done)

    def _subscriber_closed(self, ws: Any, closed: SubscriberClosed) -> None:
        """The hub closed the subscriber (1012, 1013): close the socket with that code, in the
        background (the hub has unregistered it; a stalled peer may never read the close). A
        failed send needs nothing: the handler's own loop sees the peer go."""
        if closed.code == CLOSE_GONE:
            return
        task = asyncio.get_running_loop().create_task(close_subscriber(ws, closed))
        if self._closers is None:
            self._closers = set()
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    async def cleanup_operation(self, operation_id: str) -> None:
        fast = self._fast.pop(operation_id, None)
        if fast is not None:
            fast[0].detach()
            hub = self.context.services.hub
            if hub is not None:
                hub.remove(fast[0])
        await super().cleanup_operation(operation_id)


_PAYLOAD_SHAPES = (
    ("query", str, "a string"),
    ("variables", dict | None, "an object or null"),
    ("operationName", str | None, "a string or null"),
    ("extensions", dict | None, "an object or null"),
)


def _message_problem(message: object, max_query_bytes: int) -> str | None:
    """Why a message cannot be handled, or None: not an object with a string `type`; an `id`
    that is not a non-empty string (`subscribe`, `complete`); a `ping`/`pong` payload that is not
    an object; a `subscribe` payload of the wrong shape or with a document over
    `OUTLIVE_MAX_QUERY_BYTES` (refused before anything parses or caches it)."""
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return "a message must be a JSON object with a string `type`"
    kind = message["type"]
    if kind in ("subscribe", "complete") and (
        not isinstance(message.get("id"), str) or not message["id"]
    ):
        return f"{kind}: `id` must be a non-empty string"
    if kind in ("ping", "pong") and not isinstance(message.get("payload"), dict | None):
        return f"{kind}: `payload` must be an object"
    if kind != "subscribe":
        return None
    payload = message.get("payload")
    if not isinstance(payload, dict):
        return "subscribe: `payload` must be an object"
    for field, kind, what in _PAYLOAD_SHAPES:
        if not isinstance(payload.get(field), kind):
            return f"subscribe: `payload.{field}` must be {what}"
    query = payload["query"]
    if len(query) > max_query_bytes or len(query.encode("utf-8", "replace")) > max_query_bytes:
        return f"subscribe: the query is over {max_query_bytes} bytes"
    return None


class SubscriptionsOnly:
    """The schema as the socket handler sees it: `stream` runs subscriptions and refuses queries
    and mutations (they go over HTTP), with an `error` frame for that operation."""

    def __init__(self, schema: Any) -> None:
        self._schema = schema

    def __getattr__(self, name: str) -> Any:
        return getattr(self._schema, name)

    async def stream(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["allowed_operation_types"] = (StrawberryOperation.SUBSCRIPTION,)
        return await self._schema.stream(*args, **kwargs)


def _authenticated(websocket: object) -> None:
    """Tell the app (`outlive.app`) this socket signed in: it no longer counts against
    `OUTLIVE_WS_MAX_UNAUTHENTICATED`."""
    scope = getattr(getattr(websocket, "ws", None), "scope", None)
    app = scope.get("app") if isinstance(scope, dict) else None
    authenticated = getattr(app, "authenticated", None)
    if authenticated is not None:
        authenticated(scope)
