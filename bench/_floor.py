"""The hand-written floor the read benchmarks compare with: plain Starlette + asyncpg, no GraphQL.

    python bench/_floor.py PORT      (DATABASE_URL, REDIS_URL in the environment)

- `GET /runs?first=N`: the bearer token looked up (the same statement as Outlive's), the newest N
  runs of its tenant selected (the columns of the app's `RunFields`), and the JSON Outlive answers
  for the SPA's `Runs` query, `__typename`s included, written with `json.dumps`;
- `POST /start`: the token looked up, a run inserted (Outlive's INSERT), a nudge published on a
  Redis channel of the floor's own; `{"id": …}`;
- `POST /start-run`: `startRun`'s work written by hand: the token looked up (Outlive's
  authentication statement), the tenant's start-run rate limit taken (Outlive's `RateLimiter`,
  the same Lua script), the run inserted (Outlive's `INSERT … ON CONFLICT`, admission included,
  `RETURNING *`) and its saq job enqueued (Outlive's `SaqRunInstances.start`); `{"id", "created"}`.
  It publishes no nudge: `startRun` defers its own past the answer;
- `WS /graphql`: every message on that channel, sent as it is to every socket (a raw broadcast).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

FLOOR_CHANNEL = "bench:floor:requery"
PRINCIPAL_SQL = (
    "SELECT users.id AS user_id, users.email, tenants.id AS tenant_id, tenants.slug,"
    " tenants.name FROM api_tokens JOIN users ON users.id = api_tokens.user_id"
    " JOIN tenants ON tenants.id = api_tokens.tenant_id WHERE api_tokens.token_hash = $1"
)
RUNS_SQL = (
    "SELECT id, agent, status, attempt, input, output, error, created_at, started_at,"
    " finished_at, cancel_requested_at FROM runs WHERE tenant_id = $1"
    " ORDER BY created_at DESC, id DESC LIMIT $2"
)
AUTHENTICATE_SQL = (
    "SELECT users.id AS user_id, users.email, tenants.id AS tenant_id, tenants.slug,"
    " tenants.name, api_tokens.id AS token_id, api_tokens.expires_at FROM api_tokens"
    " JOIN users ON users.id = api_tokens.user_id"
    " JOIN tenants ON tenants.id = api_tokens.tenant_id"
    " WHERE api_tokens.token_hash = $1 AND api_tokens.revoked_at IS NULL"
    " AND (api_tokens.expires_at IS NULL OR api_tokens.expires_at > now())"
)
START_RUN_SQL = (
    "INSERT INTO runs (tenant_id, agent, input, retried_from_id, dispatched_at)"
    " VALUES ($1, $2, $3::jsonb, NULL, CASE WHEN coalesce("
    "(SELECT max_running_runs FROM tenants WHERE id = $1), $4::int) >= $5::int"
    " THEN now() END)"
    " ON CONFLICT (tenant_id, agent, key)"
    " WHERE status IN ('QUEUED', 'RUNNING') AND queued_behind_id IS NULL DO NOTHING RETURNING *"
)
INSERT_SQL = (
    "INSERT INTO runs (tenant_id, agent, input) VALUES ($1, 'demo', $2::jsonb)"
    " ON CONFLICT (tenant_id, agent, key)"
    " WHERE status IN ('QUEUED', 'RUNNING') AND queued_behind_id IS NULL DO NOTHING RETURNING id"
)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _node(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "__typename": "Run",
        "id": str(row["id"]),
        "agent": row["agent"],
        "status": row["status"],
        "attempt": row["attempt"],
        "input": row["input"],
        "output": row["output"],
        "error": row["error"],
        "createdAt": _iso(row["created_at"]),
        "startedAt": _iso(row["started_at"]),
        "finishedAt": _iso(row["finished_at"]),
        "cancelRequestedAt": _iso(row["cancel_requested_at"]),
    }


async def _json_codecs(conn: asyncpg.Connection) -> None:
    for kind in ("json", "jsonb"):
        await conn.set_type_codec(kind, encoder=str, decoder=json.loads, schema="pg_catalog")


def floor_app(database_url: str, redis_url: str) -> Any:
    from redis.asyncio import Redis
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    state: dict[str, Any] = {}
    sockets: set[WebSocket] = set()

    async def tenant_of(request: Request) -> Any:
        token = request.headers.get("authorization", "").partition(" ")[2]
        row = await state["pool"].fetchrow(PRINCIPAL_SQL, hashlib.sha256(token.encode()).digest())
        return None if row is None else row["tenant_id"]

    async def runs(request: Request) -> Response:
        tenant_id = await tenant_of(request)
        if tenant_id is None:
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        first = int(request.query_params.get("first", "20"))
        rows = await state["pool"].fetch(RUNS_SQL, tenant_id, first + 1)
        page = rows[:first]
        edges = [{"__typename": "RunEdge", "cursor": str(r["id"]), "node": _node(r)} for r in page]
        info = {
            "__typename": "PageInfo",
            "hasNextPage": len(rows) > first,
            "endCursor": edges[-1]["cursor"] if edges else None,
        }
        body = {"data": {"runs": {"__typename": "RunConnection", "edges": edges, "pageInfo": info}}}
        return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")

    async def start(request: Request) -> Response:
        tenant_id = await tenant_of(request)
        if tenant_id is None:
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        run_id = await state["pool"].fetchval(
            INSERT_SQL, tenant_id, (await request.body()).decode()
        )
        nudge = {"type": "run.created", "tenantId": str(tenant_id), "id": str(run_id)}
        nudge["at"] = datetime.now(UTC).isoformat()
        await state["redis"].publish(FLOOR_CHANNEL, json.dumps(nudge))
        return JSONResponse({"id": str(run_id)})

    async def start_run(request: Request) -> Response:
        """`startRun`'s work by hand (see the module's docstring)."""
        from outlive.errors import RateLimited
        from outlive.services.ratelimits import start_run_bucket

        token = request.headers.get("authorization", "").partition(" ")[2]
        row = await state["pool"].fetchrow(
            AUTHENTICATE_SQL, hashlib.sha256(token.encode()).digest()
        )
        if row is None:
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        body = json.loads(await request.body())
        try:
            await state["limiter"].take(
                start_run_bucket(row["tenant_id"], state["rate"]), message="too many runs"
            )
        except RateLimited:
            return JSONResponse({"error": "RATE_LIMITED"}, status_code=429)
        run = await state["pool"].fetchrow(
            START_RUN_SQL,
            row["tenant_id"],
            body["agent"],
            json.dumps(body["input"]),
            state["cap"],
            state["agents"],
        )
        if run is None:
            return JSONResponse({"created": False})
        await state["instances"].start(run["id"])
        return JSONResponse({"id": str(run["id"]), "status": run["status"], "created": True})

    async def socket(websocket: WebSocket) -> None:
        await websocket.accept(subprotocol="graphql-transport-ws")
        sockets.add(websocket)
        try:
            await websocket.send_text('{"type":"connection_ack"}')
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass
        finally:
            sockets.discard(websocket)

    async def listen(pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=30)
            if message is not None and message["type"] == "message":
                frame = (
                    '{"id":"1","type":"next","payload":{"data":{"nudges":'
                    + message["data"].decode()
                    + "}}}"
                )
                for websocket in list(sockets):
                    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                        await websocket.send_text(frame)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        state["pool"] = await asyncpg.create_pool(
            database_url, min_size=4, max_size=20, init=_json_codecs
        )
        state["redis"] = redis = Redis.from_url(redis_url)
        from outlive.config import Settings
        from outlive.jobs.queues import RUNS_QUEUE, create_queue, create_redis
        from outlive.jobs.run_instances import SaqRunInstances
        from outlive.services.ratelimits import RateLimiter

        settings = Settings(database_url=database_url, redis_url=redis_url)
        limits = create_redis(redis_url)
        queue = create_queue(redis_url, RUNS_QUEUE)
        state["limiter"], state["rate"] = RateLimiter(limits), settings.rate_start_run
        state["instances"] = SaqRunInstances(queue, settings)
        state["cap"], state["agents"] = settings.tenant_max_running_runs, 1
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(FLOOR_CHANNEL)
        task = asyncio.create_task(listen(pubsub))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
            await redis.aclose()
            await limits.aclose()
            await queue.disconnect()
            await state["pool"].close()

    async def healthz(_: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [
        Route("/healthz", healthz),
        Route("/runs", runs),
        Route("/start", start, methods=["POST"]),
        Route("/start-run", start_run, methods=["POST"]),
        WebSocketRoute("/graphql", socket),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def main(port: int) -> None:
    """uvicorn with `outlive api`'s own options, serving `floor_app`."""
    import uvicorn

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from outlive.serving import uvicorn_config

    app = floor_app(os.environ["DATABASE_URL"], os.environ["REDIS_URL"])
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", port)).run()


if __name__ == "__main__":
    main(int(sys.argv[1]))
