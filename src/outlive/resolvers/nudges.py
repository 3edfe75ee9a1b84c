"""The `nudges` subscription: the connection's tenant, from its token; nothing else.

Two ways to answer it, with the same frames on the wire:

- `nudges`, the strawberry resolver: any document strawberry accepts (fragments, directives,
  variables, several operations) is executed per subscriber, as usual;
- `NudgesTransportWS`, the graphql-transport-ws handler the view uses: for the common case (the
  plain selection `subscription { nudges { type tenantId at id } }`, in any order, with aliases or
  `__typename`, see `plain_selection`) it skips per-subscriber execution and sends a frame whose
  payload every socket of the tenant shares, encoded once per nudge (`Delivery.encoded`). The
  result is byte for byte what strawberry sends for that selection (tests/realtime compare them).

Both register with the hub synchronously when the `subscribe` message is handled (the fast path)
or when the resolver starts (strawberry's), and both unregister on every way out: `complete`,
a client's close, a dropped connection, a server close.

The socket carries subscriptions only (queries and mutations go over HTTP, where the body limit,
rate limits and per-request batching apply). Its token is re-checked on every `subscribe` (4403
once it stopped working); the registry (`resolvers.sockets`) closes it sooner on a revocation
or at expiry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeGuard, cast

import strawberry
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

from outlive.realtime.hub import Subscriber, SubscriberClosed
from outlive.realtime.nudges import Nudge as NudgeRecord
from outlive.resolvers.context import Context
from outlive.resolvers.sockets import CLOSE_FORBIDDEN, CLOSE_TRY_AGAIN, TooManySockets
from outlive.schema.nudges import Nudge

log = logging.getLogger(__name__)

Info = strawberry.Info[Context, None]

MAX_PLAIN_FIELDS = 8
MAX_PLAIN_QUERY = 2000


async def nudges(info: Info) -> AsyncGenerator[Nudge, None]:
    tenant_id = info.context.tenant_id
    hub = info.context.services.hub
    if hub is None:  # realtime off: the socket stays quiet and clients refresh on fetch
        await asyncio.Future()
        return
    try:
        async with hub.subscribe(tenant_id) as subscriber:
            while True:
                yield Nudge.of((await subscriber.next()).nudge)
    except SubscriberClosed as closed:  # unsubscribed first: a stalled peer may never read this
        await _close(info.context.request, closed)
    await asyncio.Future()  # the socket is closing; its handler cancels this operation


async def _close(websocket: Any, closed: SubscriberClosed) -> None:
    with suppress(WebSocketDisconnect, RuntimeError, OSError):  # already gone
        await websocket.close(code=closed.code, reason=closed.reason)


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


@lru_cache(maxsize=256)
def plain_selection(query: str, operation_name: str | None) -> PlainSelection | None:
    """The selection when the document is exactly one plain `nudges` subscription; otherwise None
    (strawberry then parses, validates and executes it, errors included)."""
    if len(query) > MAX_PLAIN_QUERY:
        return None
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


class NudgesTransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """strawberry's graphql-transport-ws handler, with the plain `nudges` subscription answered from
    shared, pre-encoded frames. Everything else (auth, limits, pings, errors) is strawberry's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast: dict[str, tuple[Subscriber, PlainSelection]] = {}
        self.schema = cast(Any, SubscriptionsOnly(self.schema))

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        try:
            await super().handle_connection_init(message)
        except TooManySockets as exc:
            await self.websocket.close(code=CLOSE_TRY_AGAIN, reason=str(exc))

    async def shutdown(self) -> None:
        if self.context.socket is not None:  # first: its slot is free once it stops listening
            self.context.services.sockets.remove(self.context.socket)
            self.context.socket = None
        await super().shutdown()

    async def _token_still_works(self) -> bool:
        token = self.context.token
        if token is None:
            return True  # not acknowledged yet: strawberry refuses the subscribe with 4401
        if await self.context.services.authenticate(token) is not None:
            return True
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
        selection = plain_selection(operation.query, operation.operation_name)
        if selection is None:
            return
        # The task has not started yet: registering here means that nothing published after this
        # message was handled is missed (a client may rely on a ping sent after its subscribe).
        subscriber = hub.add(principal.tenant.id)
        self._fast[operation.id] = (subscriber, selection)
        operation.task.add_done_callback(lambda _: hub.remove(subscriber))

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        fast = self._fast.pop(operation.id, None)
        if fast is None:
            await super().run_operation(operation)  # refused there unless a subscription
            return
        subscriber, selection = fast
        hub = self.context.services.hub
        assert hub is not None  # noqa: S101 (checked when registered)
        websocket = self.websocket
        assert isinstance(websocket, ASGIWebSocketAdapter)  # noqa: S101 (the ASGI view's adapter)
        head = selection.frame_head(operation.id)
        try:
            while True:
                delivery = await subscriber.next()
                body = delivery.encoded(selection, selection.encode)
                await websocket.ws.send_text(head + body + "}}}")
        except SubscriberClosed as closed:
            hub.remove(subscriber)  # first: a stalled peer may never read the close
            await _close(websocket.ws, closed)
        except (WebSocketDisconnect, WebSocketDisconnected, RuntimeError, OSError):
            pass  # the peer is gone; the handler's own loop sees it and cleans up
        finally:
            hub.remove(subscriber)


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
