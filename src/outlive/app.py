"""The Starlette application: GraphQL over HTTP and WebSocket, health checks, the web app.

This is a composition root: its lifespan enters the "api" runtime (`outlive.runtime`: the engine,
Redis, the queues, the realtime hub and publisher, built from `Settings` once per process) and
hands what the resolvers need to the GraphQL view.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from cross_web import HTTPException
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult

from outlive.config import Settings
from outlive.resolvers.context import Context, Services
from outlive.resolvers.errors import coded
from outlive.resolvers.nudges import NudgesTransportWS
from outlive.resolvers.reads import ReadPath, read_path
from outlive.resolvers.schema import build_schema
from outlive.runtime import open_runtime
from outlive.services.ratelimits import RateLimiter
from outlive.services.tenants import authenticate
from outlive.telemetry import logs, metrics, tracing
from outlive.web import graphiql_response, web_routes

CONNECTION_INIT_TIMEOUT = timedelta(seconds=10)  # the defaults of OUTLIVE_WS_INIT_TIMEOUT_S
MAX_OPERATIONS_PER_SOCKET = 5  # and OUTLIVE_WS_MAX_SUBSCRIPTIONS


def _error(message: str, code: str, status: int, **headers: str) -> JSONResponse:
    """The contract's error shape outside GraphQL execution (auth, size, malformed bodies)."""
    return JSONResponse(
        {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status,
        headers=headers or None,
    )


def _unauthenticated(message: str) -> JSONResponse:
    return _error(message, "UNAUTHENTICATED", 401, **{"WWW-Authenticate": "Bearer"})


def _too_large(limit: int) -> JSONResponse:
    return _error(f"request body too large (at most {limit} bytes)", "BAD_USER_INPUT", 413)


def bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class OutliveGraphQL(GraphQL[Context, None]):
    """Strawberry's ASGI view with our auth: 401 over HTTP, close 4403 on the socket; the plain
    `nudges` subscription is sent from shared, pre-encoded frames (`NudgesTransportWS`)."""

    services: Services
    reads: ReadPath
    graphql_transport_ws_handler_class = NudgesTransportWS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope, receive)
        if not self._is_ide_page(request):
            response = await self._admit(request, scope)
            if response is not None:
                await response(scope, receive, send)
                return
            limit = self.services.settings.max_body_bytes
            principal = scope["state"]["principal"]
            # One operation (persisted queries, coalesced reads) is answered here, its body
            # counted as it arrives; anything else goes on to strawberry's view, body replayed.
            fallback = await self.reads.serve(
                scope,
                receive,
                send,
                context=lambda: Context(services=self.services, principal=principal),
                max_body=limit,
            )
            if fallback is None:
                return
            receive = fallback  # the body, read (and counted) by the read path, replayed
        try:
            response = await self.run(Request(scope, receive))
        except HTTPException as exc:  # strawberry's own refusals, in the contract's JSON shape
            response = _error(exc.reason, "BAD_USER_INPUT", exc.status_code)
        await response(scope, receive, send)

    async def _admit(self, request: Request, scope: Scope) -> Response | None:
        """A refusal before the body is read (declared size, authentication), or None."""
        limit = self.services.settings.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return _too_large(limit)
        token = bearer(request.headers.get("authorization"))
        principal = await self.services.authenticate(token) if token else None
        if principal is None:
            return _unauthenticated("invalid bearer token" if token else "missing bearer token")
        scope.setdefault("state", {})["principal"] = principal
        return None

    def decode_json(self, data: str | bytes) -> object:
        try:
            return json.loads(data)
        except RecursionError:
            raise HTTPException(400, "the request body nests too deeply") from None

    async def parse_http_body(self, request_adapter: Any) -> Any:
        return self.reads.resolve_persisted(await super().parse_http_body(request_adapter))

    @staticmethod
    def _is_ide_page(request: Request) -> bool:
        return (
            request.method == "GET"
            and "query" not in request.query_params
            and "text/html" in request.headers.get("accept", "")
        )

    async def process_result(
        self, request: Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        # Strawberry skips the operation hooks of extensions on a syntax error; code it here.
        if result.errors:
            result.errors = [coded(e) for e in result.errors]
        return await super().process_result(request, result)

    async def execute_single(
        self,
        request: Request,
        request_adapter: Any,
        sub_response: Any,
        context: Context,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        """One operation, counted and timed by name (`outlive_graphql_operation…`) and, with
        tracing on, a server span continuing the caller's `traceparent`."""
        operation, kind = metrics.operation_label(request_data.operation_name, request_data.query)
        began = time.perf_counter()
        outcome = "error"
        with tracing.span(
            f"graphql {kind} {operation}",
            kind=tracing.SpanKind.SERVER,
            parent=tracing.extract_headers(request.headers),
            attributes={"graphql.operation.name": operation, "graphql.operation.type": kind},
        ):
            try:
                result = await super().execute_single(
                    request, request_adapter, sub_response, context, root_value, request_data
                )
                outcome = "error" if result.errors else "ok"
                return result
            finally:
                metrics.GRAPHQL_OPERATIONS.labels(operation, kind, outcome).inc()
                metrics.GRAPHQL_DURATION.labels(operation, kind).observe(
                    time.perf_counter() - began
                )

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql_response()

    async def get_context(self, request: Any, response: Any) -> Context:
        principal = None
        if not isinstance(request, WebSocket):
            principal = request.scope.get("state", {}).get("principal")
            if principal is not None:
                logs.bind(tenant_id=principal.tenant.id)
        return Context(
            services=self.services, principal=principal, request=request, response=response
        )

    async def on_ws_connect(self, context: Context) -> dict[str, Any] | None:
        """Authenticate `connection_init` (4403 when refused) and register the socket (its tenant's
        cap, revocation, expiry); `TooManySockets` when the tenant is at its cap."""
        params = context.connection_params or {}
        raw = params.get("authorization") or params.get("Authorization")
        token = bearer(raw) if isinstance(raw, str) else None
        services = self.services
        generation = services.auth.generation
        principal = await services.authenticate(token) if token else None
        if principal is None or token is None:
            raise ConnectionRejectionError()
        websocket: WebSocket = context.request
        context.socket = services.sockets.add(principal, websocket.close)
        context.principal, context.token = principal, token
        # A revocation announced while we read the row was not seen by the registry: look again.
        if (
            services.auth.generation != generation
            and await authenticate(services.sessions, token) is None
        ):
            services.sockets.remove(context.socket)
            context.socket = None
            raise ConnectionRejectionError()
        return None


class OutliveApp(Starlette):
    """Starlette, with `GET`/`POST /graphql` handed straight to the GraphQL view: the hot path skips
    the router and the middleware stack (their wrappers were ~8% of a request's CPU under load);
    an exception there is uvicorn's 500, as it would have been Starlette's."""

    graphql: OutliveGraphQL | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.graphql is not None
            and scope["type"] == "http"
            and scope["path"] == "/graphql"
            and scope["method"] in ("GET", "POST")
        ):
            scope["app"] = self
            await self.graphql(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


async def _healthz(_: Request) -> Response:
    return JSONResponse({"ok": True})


class _CountedSockets:
    """The view for WebSocket routes, keeping `outlive_websocket_connections` (a class, not a
    function: Starlette would take a function for a `WebSocket` endpoint)."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics.SOCKETS.inc()
        try:
            await self._app(scope, receive, send)
        finally:
            metrics.SOCKETS.dec()


Hook = Callable[[], Awaitable[None]]


async def _metrics(request: Request) -> Response:
    """Prometheus exposition (every process's, under `outlive api --workers N`)."""
    await request.app.state.runtime.sampler.sample()
    return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)


async def _readyz(request: Request) -> Response:
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(2):
            async with request.app.state.runtime.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        checks["postgres"] = "ok"
    except Exception as exc:  # noqa: BLE001 (any failure means not ready)
        checks["postgres"] = f"error: {type(exc).__name__}"
    try:
        async with asyncio.timeout(2):
            await request.app.state.runtime.require_queues().redis.ping()
        checks["redis"] = "ok"
    except Exception as exc:  # noqa: BLE001 (any failure means not ready)
        checks["redis"] = f"error: {type(exc).__name__}"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse({"ok": ok, **checks}, status_code=200 if ok else 503)


def app_from_environment() -> Starlette:
    """The factory `outlive api --workers N` gives uvicorn: each process reads the environment."""
    settings = Settings()
    logs.setup(
        settings.log_format or "json",
        level=settings.log_level,
        libraries_level=settings.log_libraries_level,
    )
    return build_app(settings)


def build_app(
    settings: Settings, *, serve_web: bool = True, extra_lifespan: tuple[Hook, Hook] | None = None
) -> Starlette:
    """The app; `extra_lifespan` (start, stop) runs inside its lifespan, as `outlive dev` does
    with the embedded worker."""
    settings.require_services()
    schema = build_schema(settings)
    view = OutliveGraphQL(
        schema,
        graphql_ide="graphiql",
        subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
        connection_init_wait_timeout=timedelta(seconds=settings.ws_init_timeout_s),
        max_subscriptions_per_connection=settings.ws_max_subscriptions,
        allowed_origins=settings.allowed_origins,
    )
    view.reads = read_path(schema, settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_runtime(settings, "api") as runtime:
            queues, realtime = runtime.require_queues(), runtime.require_realtime()
            view.services = Services(
                sessions=runtime.sessions,
                agents=runtime.agents,
                instances=queues.instances,
                settings=settings,
                auth=realtime.auth,
                sockets=realtime.sockets,
                limiter=RateLimiter(queues.redis),
                hub=realtime.hub if settings.realtime else None,
            )
            app.state.runtime = runtime
            if extra_lifespan is not None:
                await extra_lifespan[0]()
            try:
                yield
            finally:
                if extra_lifespan is not None:
                    await extra_lifespan[1]()
                await view.reads.coalescer.cancel_all()

    routes = [
        Route("/healthz", _healthz),
        Route("/readyz", _readyz),
        Route("/graphql", view, methods=["GET", "POST"]),
        WebSocketRoute("/graphql", _CountedSockets(view)),
    ]
    if settings.metrics:
        routes.append(Route("/metrics", _metrics))
    if serve_web:
        routes.extend(web_routes())
    app = OutliveApp(routes=routes, lifespan=lifespan)
    app.graphql = view
    app.state.reads = view.reads  # its counters, for tests and benchmarks
    return app
