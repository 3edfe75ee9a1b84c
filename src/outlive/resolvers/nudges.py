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
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeGuard

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
from strawberry.subscriptions.protocols.graphql_transport_ws.types import SubscribeMessage

from outlive.realtime.hub import Subscriber, SubscriberClosed
from outlive.realtime.nudges import Nudge as NudgeRecord
from outlive.resolvers.context import Context
from outlive.resolvers.errors import INTERNAL_MESSAGE
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

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
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

    async def _coalesced_query(self, operation: Operation[Context, None]) -> bool:
        """A query over the socket shares its execution with identical reads (HTTP ones too)."""
        reads = getattr(self.view, "reads", None)
        if reads is None or not isinstance(operation.variables, dict | None):
            return False
        try:
            payload = await reads.serve_operation(
                operation.query, operation.variables, operation.operation_name, self.context
            )
        except Exception:
            log.exception("a query over the socket failed outside its resolvers")
            error = {"message": INTERNAL_MESSAGE, "extensions": {"code": "INTERNAL_SERVER_ERROR"}}
            message: Any = {"id": operation.id, "type": "error", "payload": [error]}
            with suppress(WebSocketDisconnect, WebSocketDisconnected, RuntimeError, OSError):
                await operation.send_operation_message(message)
            return True
        if payload is None:
            return False
        with suppress(WebSocketDisconnect, WebSocketDisconnected, RuntimeError, OSError):
            await operation.send_operation_message(
                {"id": operation.id, "type": "next", "payload": payload}
            )
            await operation.send_operation_message({"id": operation.id, "type": "complete"})
        return True

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        fast = self._fast.pop(operation.id, None)
        if fast is None:
            if not await self._coalesced_query(operation):
                await super().run_operation(operation)
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
