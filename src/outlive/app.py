"""The Starlette application: GraphQL over HTTP and WebSocket, health checks, the web app.

This is a composition root: its lifespan enters the "api" runtime (`outlive.runtime`: the engine,
Redis, the queues, the realtime hub and publisher, built from `Settings` once per process) and
hands what the resolvers need to the GraphQL view.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from outlive.cells import Cells, open_cells
from outlive.config import Settings
from outlive.db.ports import REAL_TIME, TimeSource
from outlive.errors import ServiceUnavailable
from outlive.graphql.errors import unavailable_payload
from outlive.graphql.http import Pipeline
from outlive.graphql.refusals import (
    bearer,
    bearer_of,
    error_response,
    too_large,
    unauthenticated_response,
    unavailable_response,
)
from outlive.graphql.schema import served
from outlive.jobs.forget import RunForgetter
from outlive.jobs.telemetry import serve_metrics
from outlive.realtime.admission import CountedSockets, refuse_socket
from outlive.realtime.outputs import OutputStore, OutputTails
from outlive.realtime.pending import Unauthenticated
from outlive.realtime.revocations import Announcer
from outlive.realtime.sockets import NudgesTransportWS, OutliveWebSocketAdapter
from outlive.resolvers.context import Context, Services
from outlive.runtime import open_runtime
from outlive.services.ratelimits import RateLimiter
from outlive.services.tenants import authenticate
from outlive.telemetry import logs, metrics
from outlive.web import graphiql_response, web_routes

log = logging.getLogger(__name__)

CONNECTION_INIT_TIMEOUT = timedelta(seconds=10)  # the defaults of OUTLIVE_WS_INIT_TIMEOUT_S
MAX_OPERATIONS_PER_SOCKET = 5  # and OUTLIVE_WS_MAX_SUBSCRIPTIONS


class OutliveGraphQL(GraphQL[Context, None]):
    """Strawberry's ASGI view, for GraphiQL and the WebSocket (401 over HTTP, close 4403 on the
    socket; the plain `nudges` subscription from shared frames, `NudgesTransportWS`). Every other
    `GET`/`POST /graphql` is authenticated here and answered by the pipeline
    (`outlive.graphql.http.Pipeline.serve`): strawberry executes no HTTP operation."""

    services: Services
    pipeline: Pipeline
    cells: Cells | None = None  # with a directory: each tenant's cell's services (`outlive.cells`)
    graphql_transport_ws_handler_class = NudgesTransportWS
    websocket_adapter_class = OutliveWebSocketAdapter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        tenant = None if self.cells is None else self.cells.tenant_of(bearer_of(scope) or "")
        if tenant is None or self.cells is None:
            await self._http(scope, receive, send)
            return
        try:  # a tenant a move holds waits here, then its requests go to its new cell
            await self.cells.admitted(tenant)
        except ServiceUnavailable as exc:
            await unavailable_response(exc)(scope, receive, send)
            return
        async with self.cells.in_flight(tenant):  # the hold drains the requests in flight
            await self._http(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response: Response | None
        if self._is_ide_page(request):
            response = await self.render_graphql_ide(request)
        else:
            response = await self._admit(request, scope)
        if response is not None:
            await response(scope, receive, send)
            return
        principal = scope["state"]["principal"]  # None: no token, acceptInvitation only
        if principal is not None:
            logs.bind(tenant_id=principal.tenant.id)
        context = Context(services=scope["state"]["services"], principal=principal, request=request)
        await self.pipeline.serve(scope, receive, send, context)

    async def _admit(self, request: Request, scope: Scope) -> Response | None:
        """A refusal before the body is read (declared size, authentication), or None."""
        limit = self.services.settings.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return too_large(limit)
        token = bearer(request.headers.get("authorization"))
        try:
            services = self._services(token)
            principal = await services.authenticate(token) if token else None
        except ServiceUnavailable as exc:  # the token cannot be checked now: 503, not 401 or 500
            return unavailable_response(exc)
        if principal is None and (token or request.method != "POST"):
            return unauthenticated_response(
                "invalid bearer token" if token else "missing bearer token"
            )
        # A POST with no token at all goes on, as nobody: the pipeline serves it only when it is
        # `acceptInvitation` (graphql/anonymous.py) and answers 401 otherwise.
        scope.setdefault("state", {}).update(principal=principal, services=services)
        return None

    def _services(self, token: str | None) -> Services:
        """The services of the token's tenant's cell (with a directory), else the process's."""
        return self.services if self.cells is None or not token else self.cells.for_token(token)

    @staticmethod
    def _is_ide_page(request: Request) -> bool:
        html = "text/html" in request.headers.get("accept", "")
        return html and request.method == "GET" and "query" not in request.query_params

    async def render_graphql_ide(self, request: Request) -> Response:
        return graphiql_response()

    async def get_context(self, request: Any, response: Any) -> Context:
        """The socket's context (authenticated by `on_ws_connect`)."""
        return Context(services=self.services, principal=None, request=request, response=response)

    async def on_ws_connect(self, context: Context) -> dict[str, Any] | None:
        """Authenticate `connection_init` (4403 when refused) and register the socket (its tenant's
        cap, revocation, expiry); `TooManySockets` when the tenant is at its cap."""
        params = context.connection_params or {}
        context.connection_params = None  # read once: not kept for the socket's lifetime
        raw = params.get("authorization") or params.get("Authorization")
        token = bearer(raw) if isinstance(raw, str) else None
        services = self._services(token)
        generation = services.auth.generation
        principal = await services.authenticate(token) if token else None
        if principal is None or token is None:
            raise ConnectionRejectionError()
        context.services = services
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


_BUSY = ServiceUnavailable("too many requests in flight in this process; retry", retry_after=1)


# A socket goes from `OutliveApp.__call__` straight to strawberry's view: not through the router
# and the middleware stack, whose closures stayed alive per open socket (~3 KiB of the ~32
# measured with tracemalloc), nor through a coroutine of ours per layer (each frame lives as long
# as its socket: with `pending.Unauthenticated`'s, ~0.7 KiB of 10,000 idle subscribers' 25.8 KiB
# each, issue 47).
_DIRECT = "/graphql"


class OutliveApp(Starlette):
    """Starlette, with `GET`/`POST /graphql` handed straight to the GraphQL view: the hot path skips
    the router and the middleware stack (their wrappers were ~8% of a request's CPU under load);
    an exception there is uvicorn's 500, as it would have been Starlette's.

    Sockets and requests are capped apart, so that a popular tenant's viewers never stop its
    writes: at most `max_requests` HTTP requests in flight (`OUTLIVE_API_LIMIT_CONCURRENCY`, 503
    past it) and at most `max_sockets` open WebSockets (`OUTLIVE_WS_MAX_SOCKETS`; one over the
    cap is accepted and closed with 1013, and the client backs off). 0: no cap."""

    graphql: OutliveGraphQL | None = None
    max_requests = 0
    max_sockets = 0
    max_unauthenticated = 0
    requests_in_flight = 0
    sockets_open = 0
    unauthenticated: OrderedDict[int, Unauthenticated] | None = None  # by id(scope), oldest first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.max_requests and self.requests_in_flight >= self.max_requests:
                busy = JSONResponse(unavailable_payload(_BUSY), 503, {"Retry-After": "1"})
                await busy(scope, receive, send)
                return
            self.requests_in_flight += 1
            try:
                await self._serve(scope, receive, send)
            finally:
                self.requests_in_flight -= 1
        elif kind == "websocket":
            if self.max_sockets and self.sockets_open >= self.max_sockets:
                await refuse_socket(scope, receive, send)
                return
            self.sockets_open += 1
            pending = self._admit_unauthenticated(scope, receive, send)
            view = self.graphql if scope["path"] == _DIRECT else None
            if view is not None:
                metrics.SOCKETS.inc()
            try:
                if view is not None:  # straight to strawberry's view (`_DIRECT`)
                    scope["app"] = self
                    await GraphQL.__call__(view, scope, pending.receive, pending.send)
                else:
                    await super().__call__(scope, pending.receive, pending.send)
            finally:
                if view is not None:
                    metrics.SOCKETS.dec()
                self.sockets_open -= 1
                self.authenticated(scope)
        else:
            await super().__call__(scope, receive, send)

    def _admit_unauthenticated(self, scope: Scope, receive: Receive, send: Send) -> Unauthenticated:
        """A new socket has not signed in yet. Past `OUTLIVE_WS_MAX_UNAUTHENTICATED` of those, the
        oldest one is closed (4408, as for an init that timed out) to make room, rather than the
        newcomer refused: a client signs in within milliseconds, so sockets that never sign in
        cannot hold every slot of the socket cap (security review round 4, I3)."""
        pending = Unauthenticated(receive, send)
        if self.unauthenticated is None:
            self.unauthenticated = OrderedDict()
        if self.max_unauthenticated and len(self.unauthenticated) >= self.max_unauthenticated:
            _, oldest = self.unauthenticated.popitem(last=False)
            oldest.evict()
        self.unauthenticated[id(scope)] = pending
        return pending

    def authenticated(self, scope: Scope) -> None:
        """The socket's `connection_init` was acknowledged (or it closed): it is not counted as
        unauthenticated any more."""
        if self.unauthenticated is not None:
            pending = self.unauthenticated.pop(id(scope), None)
            if pending is not None:
                pending.sign_in()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.graphql is not None and scope["type"] == "http" and scope["path"] == "/graphql":
            if scope["method"] not in ("GET", "POST"):  # the contract's shape, not Starlette's text
                refused = error_response(
                    "use GET or POST", "BAD_USER_INPUT", 405, Allow="GET, POST"
                )
                await refused(scope, receive, send)
                return
            scope["app"] = self
            await self.graphql(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


async def _healthz(_: Request) -> Response:
    return JSONResponse({"ok": True})


Hook = Callable[[], Awaitable[None]]


async def _metrics(request: Request) -> Response:
    """Prometheus exposition (every process's, under `outlive api --workers N`), for the bearer
    of `OUTLIVE_METRICS_TOKEN` only (the route exists only when it is set)."""
    expected = request.app.state.metrics_token
    given = bearer(request.headers.get("authorization")) or ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return unauthenticated_response("missing or wrong metrics token")
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


@contextmanager
def _metrics_listener(settings: Settings) -> Iterator[None]:
    """`OUTLIVE_METRICS_PORT`: /metrics on a listener of its own, off the public port (a thread,
    as on a worker). Under `outlive api --workers N` the first process to bind it serves it;
    any process answers for all of them (multiprocess mode), so the others need not."""
    assert settings.metrics_port is not None  # noqa: S101 (checked by the caller)
    try:
        server = serve_metrics(settings.metrics_port, settings.metrics_host)
    except OSError:
        if not metrics.is_multiprocess():
            raise
        log.info("metrics port %d served by another process of this server", settings.metrics_port)
        yield
        return
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


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
    settings: Settings,
    *,
    serve_web: bool = True,
    extra_lifespan: tuple[Hook, Hook] | None = None,
    metrics_listener: bool = True,
    time: TimeSource = REAL_TIME,
) -> Starlette:
    """The app; `extra_lifespan` (start, stop) runs inside its lifespan, as `outlive dev` does
    with the embedded worker (whose runtime serves `OUTLIVE_METRICS_PORT` for the process then:
    `metrics_listener=False`). `time`: what the schedules read (a test harness's fake clock)."""
    settings.require_services()
    view = build_view(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_runtime(settings, "api") as runtime, AsyncExitStack() as stack:
            queues, realtime = runtime.require_queues(), runtime.require_realtime()
            view.services = Services(
                sessions=runtime.sessions,
                agents=runtime.agents,
                instances=queues.instances,
                admission=runtime.sessions.admission,
                jobs=runtime.sessions.jobs,
                settings=settings,
                auth=realtime.auth,
                sockets=realtime.sockets,
                limiter=RateLimiter(queues.redis),
                announcer=Announcer(queues.redis, settings.redis_url or ""),
                hub=realtime.hub if settings.realtime else None,
                outputs=OutputTails(OutputStore.of(queues.redis, settings)),
                forget=RunForgetter(queues.runs, queues.redis),
                time=time,
            )
            app.state.runtime = runtime
            view.cells = await open_cells(stack, settings, runtime, view.services)
            if view.cells is not None:  # the sockets' tokens are re-checked on every cell
                realtime.sockets.check_with(view.cells.still_valid)
            if settings.metrics and settings.metrics_token is not None:
                app.state.metrics_token = settings.metrics_token.get_secret_value()
            if metrics_listener and settings.metrics and settings.metrics_port is not None:
                stack.enter_context(_metrics_listener(settings))
            if extra_lifespan is not None:
                await extra_lifespan[0]()
            try:
                yield
            finally:
                if extra_lifespan is not None:
                    await extra_lifespan[1]()
                await view.pipeline.coalescer.cancel_all()

    app = OutliveApp(routes=_routes(view, settings, serve_web=serve_web), lifespan=lifespan)
    app.graphql = view
    app.max_requests = settings.api_limit_concurrency
    app.max_sockets = settings.ws_max_sockets
    app.max_unauthenticated = settings.ws_max_unauthenticated
    return app


def build_view(settings: Settings) -> OutliveGraphQL:
    """The GraphQL view: strawberry's (GraphiQL, the socket) and the HTTP pipeline beside it."""
    schema = served(settings)  # the socket and HTTP share its one document cache
    view = OutliveGraphQL(
        schema.schema,
        graphql_ide="graphiql",
        subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
        connection_init_wait_timeout=timedelta(seconds=settings.ws_init_timeout_s),
        max_subscriptions_per_connection=settings.ws_max_subscriptions,
        allowed_origins=settings.allowed_origins,
    )
    view.pipeline = Pipeline(schema.schema, settings, schema.documents)
    return view


def _routes(view: OutliveGraphQL, settings: Settings, *, serve_web: bool) -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        Route("/healthz", _healthz),
        Route("/readyz", _readyz),
        Route("/graphql", view, methods=["GET", "POST"]),
        WebSocketRoute("/graphql", CountedSockets(view)),
    ]
    if settings.metrics and settings.metrics_token is not None:  # else off the public port
        routes.append(Route("/metrics", _metrics))
    if serve_web:
        routes.extend(web_routes())
    return routes
