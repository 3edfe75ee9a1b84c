"""The HTTP path for one GraphQL operation: persisted queries, coalesced reads, one encoding.

`ReadPath.serve` answers an authenticated `GET` or `POST /graphql` that carries one operation, at
the ASGI level, without strawberry's view: the document is prepared once per process
(`documents.Documents`), a query shares its execution with identical reads
(`coalescing.Coalescer`) and is encoded to JSON once for all of them. Strawberry's schema still
executes every operation (resolvers, limits, error codes are unchanged). Whatever is not that
simple case (a document that does not parse or validate, a batch, another content type, a
subscription, a mutation sent with GET) is handed back to strawberry's view, with the body it
read, and strawberry answers it as before.

The coalescing key is everything an answer depends on: the tenant, the user when the operation
reads the principal's own data (`documents.Scope`), the document, the operation name and the
variables. Mutations are never coalesced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson
import strawberry
from graphql import GraphQLError, OperationType
from starlette.types import Message, Receive, Scope, Send
from strawberry.extensions import AddValidationRules, MaxTokensLimiter
from strawberry.types.graphql import OperationType as Allowed

from outlive.config import Settings
from outlive.errors import BadUserInput
from outlive.resolvers.coalescing import Coalescer, SharedExecutionCancelled
from outlive.resolvers.context import Context
from outlive.resolvers.documents import (
    Documents,
    PersistedQueries,
    PersistedQueryNotFound,
    Prepared,
)
from outlive.resolvers.documents import Scope as ReadScope
from outlive.resolvers.errors import INTERNAL_MESSAGE, ErrorCodes, coded
from outlive.resolvers.limits import RequestLimits, check_request
from outlive.resolvers.plans import Plan, Unplanned, compile_plan
from outlive.services.tenants import Principal
from outlive.telemetry import metrics, tracing

log = logging.getLogger(__name__)

EXECUTION_HEADER = b"outlive-execution"
_JSON = (b"content-type", b"application/json")
_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
_QUERY_ONLY = frozenset({Allowed.QUERY})
_MUTATION_ONLY = frozenset({Allowed.MUTATION})


@dataclass(frozen=True, slots=True)
class Answer:
    """An executed operation: the response payload and its JSON, encoded once."""

    payload: dict[str, Any]
    body: bytes


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    query: str | None
    variables: dict[str, Any] | None
    operation_name: str | None
    extensions: dict[str, Any] | None


def read_path(schema: strawberry.Schema, settings: Settings) -> ReadPath:
    """The read path of `schema`: documents are validated with the rules and the token limit its
    extensions add (so a rule added there applies here too)."""
    extensions = schema.get_extensions()
    rules = [
        rule
        for extension in extensions
        if isinstance(extension, AddValidationRules)
        for rule in extension.validation_rules
    ]
    tokens = [e.max_token_count for e in extensions if isinstance(e, MaxTokensLimiter)]
    max_tokens = min(tokens, default=settings.max_query_tokens)
    documents = Documents(schema._schema, rules=rules, max_tokens=max_tokens)
    return ReadPath(
        schema,
        documents,
        coalescing=settings.read_coalescing,
        persisted_queries=settings.persisted_queries_max,
        linger_ms=settings.read_linger_ms,
        max_wait_ms=settings.read_max_wait_ms,
        plans=settings.compiled_plans,
    )


class ReadPath:
    def __init__(
        self,
        schema: strawberry.Schema,
        documents: Documents,
        *,
        coalescing: bool,
        persisted_queries: int,
        linger_ms: float = 0.0,
        max_wait_ms: float = 0.0,
        plans: bool = True,
    ) -> None:
        self.schema = schema
        self.documents = documents
        self.persisted = PersistedQueries(persisted_queries)
        self.coalescer: Coalescer[Answer] = Coalescer(
            linger_s=linger_ms / 1000, max_wait_s=max_wait_ms / 1000
        )
        self.coalescing = coalescing
        # Compiled plans skip strawberry's per-operation extensions: only with the known ones.
        known = {"ParserCache", "ValidationCache", "AddValidationRules", "MaxTokensLimiter"}
        known.add(RequestLimits.__name__)  # checked here too, before a plan runs
        self.plans = plans and {type(e).__name__ for e in schema.get_extensions()} <= {
            *known,
            ErrorCodes.__name__,
        }

    async def serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        context: Callable[[], Context],
        max_body: int,
    ) -> Receive | None:
        """Answer the request and return None, or return a `receive` for strawberry's view (which
        replays the body read here)."""
        body = b""
        if scope["method"] == "POST":
            body, complete = await _read_body(receive, max_body)
            if not complete:
                await _send(send, 413, _error("request body too large", "BAD_USER_INPUT"))
                return None
        request = _parse(scope, body)
        if request is None:
            return _replay(body, receive)
        traceparent = _header(scope, b"traceparent").decode("latin-1") or None
        answered = await self._answer(request, send, context, traceparent)
        return None if answered else _replay(body, receive)

    def resolve_persisted(self, data: Any) -> Any:
        """strawberry's parsed request with a known persisted query's text filled in (the path
        strawberry answers: see `serve`)."""
        extension = (getattr(data, "extensions", None) or {}).get("persistedQuery")
        if getattr(data, "query", "") is not None or not isinstance(extension, dict):
            return data
        with contextlib.suppress(PersistedQueryNotFound, BadUserInput):
            query, _ = self.persisted.resolve(None, extension)
            return dataclasses.replace(data, query=query)
        return data

    async def _answer(
        self,
        request: Request,
        send: Send,
        context: Callable[[], Context],
        traceparent: str | None = None,
    ) -> bool:
        query, keep = request.query, None
        extension = (request.extensions or {}).get("persistedQuery")
        if extension is not None:
            try:
                query, keep = self.persisted.resolve(query, extension)
            except PersistedQueryNotFound:
                body = _error("PersistedQueryNotFound", "PERSISTED_QUERY_NOT_FOUND")
                await _send(send, 200, body)
                return True
            except BadUserInput as exc:
                await _send(send, 400, _error(exc.message, exc.code))
                return True
        prepared = self.documents.prepare(query) if query is not None else None
        if prepared is None:
            return False
        if keep is not None:
            self.persisted.keep(keep, prepared.query)
        operation = prepared.operation(request.operation_name)
        if operation is None or operation.type is OperationType.SUBSCRIPTION:
            return False
        if operation.type is OperationType.MUTATION and request.method != "POST":
            await _send(send, 400, b"mutations are not allowed when using GET", _TEXT)
            return True
        try:
            body, execution = await self._observed(
                prepared, request, operation.type, operation.scope, context(), traceparent
            )
        except SharedExecutionCancelled:
            await _send(send, 503, _error("the server is stopping", "INTERNAL_SERVER_ERROR"))
            return True
        except Exception:
            log.exception("GraphQL operation failed outside its resolvers")
            await _send(send, 500, _error(INTERNAL_MESSAGE, "INTERNAL_SERVER_ERROR"))
            return True
        headers = [] if execution is None else [(EXECUTION_HEADER, str(execution).encode())]
        await _send(send, 200, body, headers)
        return True

    async def _observed(
        self,
        prepared: Prepared,
        request: Request,
        kind: OperationType,
        scope: ReadScope,
        context: Context,
        traceparent: str | None,
    ) -> tuple[bytes, int | None]:
        """`_run`, counted and timed by operation name (`outlive_graphql_operation…`) and, with
        tracing on, in a server span continuing the caller's `traceparent`, as strawberry's path
        is (`OutliveGraphQL.execute_single`)."""
        name, label = metrics.operation_label(request.operation_name, prepared.query)
        began = time.perf_counter()
        outcome = "error"
        with tracing.span(
            f"graphql {label} {name}",
            kind=tracing.SpanKind.SERVER,
            parent=traceparent if tracing.is_enabled() else None,
            attributes={"graphql.operation.name": name, "graphql.operation.type": label},
        ):
            try:
                answer, execution = await self._run(prepared, request, kind, scope, context)
                outcome = "error" if answer.payload.get("errors") else "ok"
                return answer.body, execution
            finally:
                metrics.GRAPHQL_OPERATIONS.labels(name, label, outcome).inc()
                metrics.GRAPHQL_DURATION.labels(name, label).observe(time.perf_counter() - began)

    async def _run(
        self,
        prepared: Prepared,
        request: Request,
        kind: OperationType,
        scope: ReadScope,
        context: Context,
    ) -> tuple[Answer, int | None]:
        async def execute() -> Answer:
            allowed = _MUTATION_ONLY if kind is OperationType.MUTATION else _QUERY_ONLY
            return await self.execute(prepared, request, context, allowed)

        if kind is not OperationType.QUERY or not self.coalescing:
            return await execute(), None
        key = read_key(context.require(), scope, prepared.query, request)
        shared = await self.coalescer.run(key, execute)
        return shared.value, shared.execution

    def plan(self, prepared: Prepared, operation_name: str | None) -> Plan | None:
        """The compiled plan of the operation (made once per document), or None."""
        if not self.plans:
            return None
        if operation_name not in prepared.plans:
            operation = prepared.operation(operation_name)
            prepared.plans[operation_name] = (
                compile_plan(self.schema._schema, operation.node, prepared.fragments)
                if operation is not None
                else None
            )
        plan = prepared.plans[operation_name]
        return plan if isinstance(plan, Plan) else None

    async def execute(
        self,
        prepared: Prepared,
        request: Request,
        context: Context,
        allowed: frozenset[Allowed],
    ) -> Answer:
        plan = self.plan(prepared, request.operation_name)
        if plan is not None:
            try:
                check_request(
                    self.schema._schema,
                    prepared.query,
                    prepared.document,
                    request.operation_name,
                    request.variables,
                    context.services.settings,
                )
            except BadUserInput as exc:
                refused = GraphQLError(exc.message, original_error=exc)
                rejected: dict[str, Any] = {"data": None, "errors": [coded(refused).formatted]}
                return Answer(rejected, encode(rejected))
            with contextlib.suppress(Unplanned):
                data, errors = await plan.run(request.variables, context)
                payload: dict[str, Any] = {"data": data}
                if errors:
                    payload["errors"] = [coded(e).formatted for e in errors]
                return Answer(payload, encode(payload))
        result = await self.schema.execute(
            prepared.query,
            variable_values=request.variables,
            context_value=context,
            operation_name=request.operation_name,
            allowed_operation_types=allowed,
        )
        payload = {"data": result.data}
        if result.errors:
            payload["errors"] = [coded(e).formatted for e in result.errors]
        if result.extensions:
            payload["extensions"] = result.extensions
        return Answer(payload, encode(payload))


def encode(payload: dict[str, Any]) -> bytes:
    """The response's JSON: orjson (a few times faster than `json` on a page of runs); `json`
    for what orjson refuses (an integer over 64 bits in a JSON value)."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload, separators=(",", ":")).encode()


def _canonical(variables: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(variables, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(variables, sort_keys=True).encode()


def read_key(
    principal: Principal, scope: ReadScope, query: str, request: Request
) -> tuple[object, ...]:
    """Who may share an answer: same tenant, same user unless the operation reads only the
    tenant's data, same document, operation and variables."""
    user = principal.user.id if scope is ReadScope.PRINCIPAL else None
    variables = _canonical(request.variables) if request.variables else b""
    return (principal.tenant.id, user, query, request.operation_name, variables)


# --- ASGI plumbing -------------------------------------------------------------------------------


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True  # a disconnect: strawberry's view sees it too
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return b""


def _parse(scope: Scope, body: bytes) -> Request | None:
    """The request's one operation, or None when it is not the simple case."""
    method = scope["method"]
    try:
        if method == "POST":
            if b"application/json" not in _header(scope, b"content-type").lower():
                return None
            raw: Any = orjson.loads(body)
        else:
            raw = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
            for field in ("variables", "extensions"):
                raw[field] = orjson.loads(raw[field]) if raw.get(field) else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(raw, dict):
        return None
    query: object = raw.get("query")
    variables: object = raw.get("variables")
    name: object = raw.get("operationName")
    extensions: object = raw.get("extensions")
    if (
        not isinstance(query, str | None)
        or not isinstance(variables, dict | None)
        or not isinstance(name, str | None)
        or not isinstance(extensions, dict | None)
    ):
        return None
    return Request(method, query or None, variables, name or None, extensions)


def _error(message: str, code: str) -> bytes:
    body = {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]}
    return json.dumps(body, separators=(",", ":")).encode()


async def _send(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *(headers if headers and headers[0][0] == b"content-type" else [_JSON]),
                (b"content-length", str(len(body)).encode()),
                *(h for h in headers or () if h[0] != b"content-type"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
