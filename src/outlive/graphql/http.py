"""GraphQL over HTTP: every authenticated `GET` or `POST /graphql` is answered by `Pipeline.serve`.

Read `Pipeline.serve` top to bottom; it is the whole path:

1. `read_request`: the body (counted as it arrives) or the query string, to one `Request`; a
   document over `OUTLIVE_MAX_QUERY_BYTES` is refused here, before any cache sees it;
2. `persisted.request_document`: its document, from its text or its persisted-query hash, parsed
   and validated once per process (`documents.Documents`, the one cache);
3. `_checked`: the operation it names, allowed for the method, valid (a refusal here is counted
   as `invalid`: only a validated operation's declared name becomes a metrics label);
4. `observe_operation` (`operations.py`) counts, times and traces it, and logs its route;
5. `choose_route`: a compiled plan (`plans.py`) or graphql-core's `execute`;
6. `_executed`: a query shares its execution with identical reads (`coalescing.py`, keyed by
   `read_key`); the execution first checks the limits (`_limited`: `limits.py`, variables
   coerced), then runs the route (`_run`);
7. errors coded (`errors.coded`) and the answer encoded to JSON once (`_answer`), for every
   request that shares it; `send_answer` sends it.

A request refused on the way (`Refused`) is answered in the contract's error shape. Strawberry
keeps the schema, GraphiQL and the WebSocket; it executes nothing here.
"""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl
from uuid import UUID

import orjson
import strawberry
from graphql import ExecutionResult, GraphQLError, GraphQLSchema, OperationType, execute
from graphql.execution.values import VariableValues, get_variable_values
from starlette.types import Receive, Scope, Send

from outlive.config import Settings
from outlive.db import reads
from outlive.db.reads import ResponseTooLarge
from outlive.errors import BadUserInput, ServiceUnavailable
from outlive.graphql import anonymous, permissions
from outlive.graphql.coalescing import Coalescer, SharedExecutionCancelled
from outlive.graphql.documents import Documents, Operation, Prepared
from outlive.graphql.documents import Scope as ReadScope
from outlive.graphql.errors import (
    INTERNAL_MESSAGE,
    coded,
    error_payload,
    status_of,
    unavailable,
    unavailable_payload,
)
from outlive.graphql.limits import check_cost, check_variables
from outlive.graphql.operations import Route, labels_for, observe_operation, observe_refused
from outlive.graphql.persisted import PersistedQueryNotFound, request_document
from outlive.graphql.plans import Plan, Unplanned, compile_plan
from outlive.resolvers.context import Context
from outlive.services.tenants import Principal

log = logging.getLogger(__name__)

EXECUTION_HEADER = b"outlive-execution"
_ALLOWED = {"GET": (OperationType.QUERY,), "POST": (OperationType.QUERY, OperationType.MUTATION)}
_PLURAL = {OperationType.QUERY: "queries", OperationType.MUTATION: "mutations"}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    query: str | None
    variables: dict[str, Any] | None
    operation_name: str | None
    extensions: dict[str, Any] | None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """A response: its status, its JSON (encoded once) and how it was made."""

    status: int
    body: bytes
    route: Route = Route.REFUSED
    has_errors: bool = True
    execution: str | None = None  # the shared execution that made it (random; coalesced reads)
    headers: tuple[tuple[bytes, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Work:
    """One checked operation, ready to run by its route."""

    request: Request
    prepared: Prepared
    operation: Operation
    route: Route
    plan: Plan | None


class Refused(Exception):
    """The request is answered (`answer`) before anything executes."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer


def refusal(status: int, message: str, code: str = "BAD_USER_INPUT") -> Refused:
    """A refusal in the contract's error shape (strawberry's status and message for the same)."""
    return Refused(Answer(status, encode(error_payload(message, code))))


def unauthenticated() -> Refused:
    """401, as `app.py` answers a request without a token (`anonymous.py` lets one through)."""
    body = encode(error_payload("missing bearer token", "UNAUTHENTICATED"))
    return Refused(Answer(401, body, headers=((b"www-authenticate", b"Bearer"),)))


def refused_with(errors: list[GraphQLError]) -> Refused:
    """A 200 with coded errors and null data, as GraphQL answers a document it will not run."""
    payload = {"data": None, "errors": [coded(e).formatted for e in errors]}
    return Refused(Answer(200, encode(payload)))


class Pipeline:
    """One per process, beside the strawberry schema it executes and the document cache it
    shares with the socket (`graphql.schema.served`)."""

    def __init__(self, schema: strawberry.Schema, settings: Settings, documents: Documents) -> None:
        self.schema: GraphQLSchema = schema._schema
        self.settings = settings
        self.documents = documents
        self.gates = reads.TenantGates(settings.api_tenant_max_reads)
        self.labels = labels_for(settings)
        self.coalescer: Coalescer[Answer] = Coalescer(
            linger_s=settings.read_linger_ms / 1000, max_wait_s=settings.read_max_wait_ms / 1000
        )

    async def serve(self, scope: Scope, receive: Receive, send: Send, context: Context) -> None:
        """Answer one request: the whole path, step by step (see the module's docstring)."""
        try:
            request = await read_request(scope, receive, self.settings)
            prepared = self._document(request, context)  # parsed and validated once per process
            name = request.operation_name
            operation = self._checked(request, prepared)  # known, allowed, valid
            if context.principal is None and not anonymous.is_anonymous(operation):
                raise unauthenticated()  # no token: acceptInvitation only (`anonymous.py`)
            if (denial := permissions.denied(operation, context.principal)) is not None:
                raise refusal(denial.status, denial.message, denial.code)  # nothing ran
            declared, kind = operation.node.name, operation.type.value
            label = self.labels.label(declared.value if declared else None, _gate_key(context))
            with observe_operation(label, kind, request.traceparent) as seen:
                route, plan = choose_route(self, prepared, name)  # a plan, or graphql-core
                work = Work(request, prepared, operation, route, plan)
                async with self.gates.held(_gate_key(context)) as gate:
                    with reads.scoped(reads.ReadScope(gate, self.settings.max_response_bytes)):
                        answer = await self._executed(work, context)  # the tenant's share
                seen.route, seen.ok = answer.route, not answer.has_errors
        except Refused as refused:
            answer = refused.answer
        await send_answer(send, answer)  # coded errors, JSON encoded once (`_answer`)

    def _document(self, request: Request, context: Context) -> Prepared:
        principal = context.principal
        if principal is None and not anonymous.may_try(request.query):
            raise unauthenticated()
        try:
            prepared = request_document(
                self.documents,
                request.query,
                request.extensions,
                # a hash is found by its tenant only; none for a request without a token
                owner=principal.tenant.id if principal else anonymous.ANONYMOUS_OWNER,
                persisted=self.settings.persisted_queries_max > 0 and principal is not None,
            )
        except PersistedQueryNotFound:
            raise refusal(200, "PersistedQueryNotFound", "PERSISTED_QUERY_NOT_FOUND") from None
        except BadUserInput as exc:
            raise refusal(400, exc.message, exc.code) from None
        if prepared is None:
            raise refusal(400, "No GraphQL query found in the request")
        return prepared

    async def _executed(self, work: Work, context: Context) -> Answer:
        """The answer of the route; a query's shared with identical reads (`coalescing`)."""
        try:
            shares = work.operation.type is OperationType.QUERY and context.principal is not None
            if shares and self.settings.read_coalescing:  # an anonymous read shares nothing
                answer = await self._coalesced(work, context)
            else:
                answer = await self._run(work, context)
        except Refused:
            raise
        except SharedExecutionCancelled:
            raise refusal(503, "the server is stopping", "INTERNAL_SERVER_ERROR") from None
        except Exception as exc:
            if (down := unavailable(exc)) is not None:  # PostgreSQL unreachable: 503, retry
                raise Refused(Answer(503, encode(unavailable_payload(down)))) from None
            log.exception("GraphQL operation failed outside its resolvers")
            raise refusal(500, INTERNAL_MESSAGE, "INTERNAL_SERVER_ERROR") from None
        return answer

    def _checked(self, request: Request, prepared: Prepared) -> Operation:
        """The operation, or `Refused` (counted as `invalid`: no name the client chose becomes a
        label): a document that does not parse, an unknown operation, one the method does not
        allow, one that does not validate."""
        try:
            return self._operation(request, prepared)
        except Refused:
            observe_refused()
            raise

    def _operation(self, request: Request, prepared: Prepared) -> Operation:
        if prepared.document is None:
            raise refused_with(prepared.errors)
        operation = prepared.operation(request.operation_name)
        if operation is None:
            name = request.operation_name
            raise refusal(
                400,
                "Can't get GraphQL operation type"
                if name is None
                else f'Unknown operation named "{name}".',
            )
        if operation.type is OperationType.SUBSCRIPTION:
            raise refusal(400, "subscriptions are served over the WebSocket: use ws(s)://…/graphql")
        if operation.type not in _ALLOWED[request.method]:
            plural = _PLURAL[operation.type]
            raise refusal(400, f"{plural} are not allowed when using {request.method}")
        if prepared.errors:
            raise refused_with(prepared.errors)
        return operation

    def _limited(self, work: Work) -> VariableValues:
        """The variables, coerced, or `Refused`: bad input (NUL, nesting), over the cost limit,
        variables that do not coerce. Checked once per execution: requests that share one
        (`read_key`) have the same document, operation and variables, so the same verdict."""
        request = work.request
        try:
            check_variables(request.variables, self.settings.max_json_depth)
            cost = work.prepared.cost(self.schema, request.operation_name)
            check_cost(cost, request.variables, self.settings)
        except BadUserInput as exc:
            raise refused_with([GraphQLError(exc.message, original_error=exc)]) from None
        definitions = work.operation.node.variable_definitions or ()
        coerced = get_variable_values(self.schema, definitions, request.variables or {})
        if isinstance(coerced, list):
            raise refused_with(coerced)
        return coerced

    async def _coalesced(self, work: Work, context: Context) -> Answer:
        async def run() -> Answer:
            return await self._run(work, context)

        scope = work.operation.scope
        key = read_key(context.require(), scope, work.prepared.query, work.request)
        shared = await self.coalescer.run(key, run)
        answer = shared.value
        return Answer(answer.status, answer.body, answer.route, answer.has_errors, shared.execution)

    async def _run(self, work: Work, context: Context) -> Answer:
        """Execute by the route chosen: the plan, or graphql-core (also when the plan gives up)."""
        route, request, prepared = work.route, work.request, work.prepared
        variables = self._limited(work)
        if work.plan is not None:
            try:
                data, errors = await work.plan.run(variables, context)
                return _answer(ExecutionResult(data, errors or None), route, self.max_bytes)
            except Unplanned:
                route = Route.EXECUTE_UNPLANNED
        assert prepared.document is not None  # noqa: S101 (checked)
        result = execute(
            self.schema,
            prepared.document,
            context_value=context,
            variable_values=request.variables,
            operation_name=request.operation_name,
        )
        if inspect.isawaitable(result):
            result = await result
        assert isinstance(result, ExecutionResult)  # noqa: S101 (no incremental delivery)
        return _answer(result, route, self.max_bytes)

    @property
    def max_bytes(self) -> int:
        return self.settings.max_response_bytes


def choose_route(
    pipeline: Pipeline, prepared: Prepared, name: str | None
) -> tuple[Route, Plan | None]:
    """The one place that decides how an operation runs, and why (`Route`): its compiled plan,
    made once per document and operation, or graphql-core's executor."""
    if not pipeline.settings.compiled_plans:
        return Route.EXECUTE_PLANS_OFF, None
    if name not in prepared.plans:
        operation = prepared.operation(name)
        assert operation is not None  # noqa: S101 (checked before a route is chosen)
        prepared.plans[name] = compile_plan(pipeline.schema, operation.node, prepared.fragments)
    plan = prepared.plans[name]
    if isinstance(plan, Plan):
        return Route.PLAN, plan
    return Route.EXECUTE_UNPLANNABLE, None


def _answer(result: ExecutionResult, route: Route, max_bytes: int) -> Answer:
    """The answer's JSON; past `max_bytes` (`OUTLIVE_MAX_RESPONSE_BYTES`, counted as rows were
    fetched, `db.reads`, and on the JSON itself), that refusal alone: never a truncated answer."""
    if not any(isinstance(_original(e), ResponseTooLarge) for e in result.errors or ()):
        payload: dict[str, Any] = {"data": result.data}
        if result.errors:
            payload["errors"] = [coded(e).formatted for e in result.errors]
        if result.extensions:
            payload["extensions"] = result.extensions
        body = encode(payload)
        if len(body) <= max_bytes:
            return Answer(status_of(result.errors), body, route, bool(result.errors))
    refused = error_payload(ResponseTooLarge(max_bytes).message, ResponseTooLarge.code)
    return Answer(200, encode(refused), route, True)


def _original(error: BaseException | None) -> BaseException | None:
    while isinstance(error, GraphQLError) and error.original_error is not None:
        error = error.original_error
    return error


def encode(payload: dict[str, Any]) -> bytes:
    """The response's JSON: orjson (a few times faster than `json` on a page of runs); `json`
    for what orjson refuses (an integer over 64 bits in a JSON value)."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload, separators=(",", ":")).encode()


def read_key(
    principal: Principal, scope: ReadScope, query: str, request: Request
) -> tuple[object, ...]:
    """Who may share an answer: same tenant, same user unless the operation reads only the
    tenant's data, same document, operation and variables."""
    user = principal.user.id if scope is ReadScope.PRINCIPAL else None
    variables = _canonical(request.variables) if request.variables else b""
    reads = principal.run_id  # a run read token shares answers with readers of its run only
    return (principal.tenant.id, reads, user, query, request.operation_name, variables)


def _canonical(variables: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(variables, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(variables, sort_keys=True).encode()


# --- ASGI: the request in, the answer out ----------------------------------------------------


async def read_request(scope: Scope, receive: Receive, settings: Settings) -> Request:
    """The request's one operation, or `Refused` (strawberry's messages for the same refusals).
    A document over `OUTLIVE_MAX_QUERY_BYTES` is refused here, before any cache sees its text."""
    method, max_body = scope["method"], settings.max_body_bytes
    traceparent = _header(scope, b"traceparent").decode("latin-1") or None
    try:
        if method == "POST":
            body = await _read_body(receive, max_body)
            if b"application/json" not in _header(scope, b"content-type").lower():
                raise refusal(400, "Unsupported content type")
            raw: Any = orjson.loads(body)
        else:
            raw = dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))
            for field in ("variables", "extensions"):
                raw[field] = orjson.loads(raw[field]) if raw.get(field) else None
    except (ValueError, UnicodeDecodeError):
        raise refusal(400, "Unable to parse request body as JSON") from None
    if isinstance(raw, list):
        raise refusal(400, "Batching is not enabled")
    if not isinstance(raw, dict):
        raise refusal(400, "Unable to parse request body as JSON")
    fields = {f: raw.get(f) for f in ("query", "variables", "operationName", "extensions")}
    for field, kind, what in _SHAPES:
        if not isinstance(fields[field], kind):
            raise refusal(400, f"The GraphQL operation's `{field}` must be {what}, if provided.")
    query, name = fields["query"], fields["operationName"]
    if query and _too_long(query, settings.max_query_bytes):
        raise refusal(413, f"the query is too large (at most {settings.max_query_bytes} bytes)")
    return Request(
        method, query or None, fields["variables"], name or None, fields["extensions"], traceparent
    )


def _too_long(query: str, limit: int) -> bool:
    return len(query) > limit or len(query.encode("utf-8", "surrogatepass")) > limit


_SHAPES = (
    ("query", str | None, "a string or null"),
    ("variables", dict | None, "an object or null"),
    ("operationName", str | None, "a string or null"),
    ("extensions", dict | None, "an object or null"),
)


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # a disconnect: the answer goes nowhere
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise refusal(413, f"request body too large (at most {limit} bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return b""


async def send_answer(send: Send, answer: Answer) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(answer.body)).encode()),
    ]
    if answer.execution is not None:
        headers.append((EXECUTION_HEADER, answer.execution.encode()))
    headers.extend(answer.headers)
    if answer.status == 503:  # PostgreSQL unreachable, or stopping: what `retryAfter` says too
        headers.append((b"retry-after", str(ServiceUnavailable().retry_after).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


ANONYMOUS_GATE = UUID(int=0)  # the read gate of the requests that carry no token (acceptInvitation)


def _gate_key(context: Context) -> UUID:
    """Whose reads a request's statements count against: its tenant's, or the anonymous ones'."""
    return ANONYMOUS_GATE if context.principal is None else context.principal.tenant.id
