"""`outlive.client`: a typed async Python client of Outlive's GraphQL API.

    async with OutliveClient("https://outlive.example", token) as client:
        started = await client.start_run("llm", {"prompt": "Hello"}, key="user-42")
        async for chunk in client.run_output(started.run.id):
            print(chunk.text, end="")
        run = await client.run(started.run.id)

It speaks the public API only (contract §3 and §4): GraphQL over HTTP with httpx, and `runOutput` on
the `graphql-transport-ws` WebSocket (the `websockets` library). Every answer is a pydantic
model of `outlive.client.types`; an error is `OutliveError` with the contract's `code` (and
`retry_after` when the server gave one). It imports nothing of the server's: a process that only
calls Outlive pays for httpx and pydantic, not for the engine.

A run read token (`create_run_read_token`) is a token too: `OutliveClient(url, read_token)`
reads that one run (`run`, `events`, `steps`, `run_output`) and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import httpx

from outlive.client import operations as ops
from outlive.client.types import (
    DebounceInput,
    OutputChunk,
    Run,
    RunConflict,
    RunConnection,
    RunEvent,
    RunOrder,
    RunStatus,
    RunStep,
    SignalRunPayload,
    StartRunPayload,
)

__all__ = [
    "DebounceInput",
    "OutliveClient",
    "OutliveError",
    "OutputChunk",
    "Run",
    "RunConflict",
    "RunConnection",
    "RunEvent",
    "RunOrder",
    "RunStatus",
    "RunStep",
    "SignalRunPayload",
    "StartRunPayload",
]


class OutliveError(Exception):
    """The API answered errors: the first one's message and `code` (`NOT_FOUND`,
    `BAD_USER_INPUT`, `FORBIDDEN`, `RATE_LIMITED`, …), all of them in `errors`."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        first = errors[0] if errors else {}
        extensions = first.get("extensions") or {}
        super().__init__(f"{extensions.get('code', 'ERROR')}: {first.get('message', '')}")
        self.errors = errors
        self.code: str | None = extensions.get("code")
        self.retry_after: float | None = extensions.get("retryAfter")


class OutliveClient:
    """A client for one token. `http`: an `httpx.AsyncClient` of yours (its base URL is the
    server's), e.g. one with an ASGI transport in tests; else one is made (and closed)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        http: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._own = http is None
        self._http = http or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def __aenter__(self) -> OutliveClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def execute(self, document: str, variables: dict[str, Any] | None = None) -> Any:
        """Any operation: its `data`; `OutliveError` with its errors."""
        response = await self._http.post(
            "/graphql",
            json={"query": document, "variables": variables or {}},
            headers={"Authorization": f"Bearer {self._token}"},
        )
        try:
            body = response.json()
        except ValueError:
            response.raise_for_status()
            raise
        if body.get("errors"):
            raise OutliveError(body["errors"])
        response.raise_for_status()
        return body["data"]

    # --- runs ----------------------------------------------------------------------------------

    async def start_run(
        self,
        agent: str,
        input: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        on_conflict: RunConflict | str | None = None,
        tags: Sequence[str] | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        debounce: DebounceInput | None = None,
    ) -> StartRunPayload:
        """`startRun`, with every option of `StartRunInput`."""
        values = {
            "agent": agent,
            "input": input,
            "key": key,
            "onConflict": None if on_conflict is None else str(on_conflict),
            "tags": None if tags is None else list(tags),
            "idempotencyKey": idempotency_key,
            "priority": priority,
            "debounce": None if debounce is None else debounce.model_dump(by_alias=True),
        }
        data = await self.execute(ops.START_RUN, {"input": values})
        return StartRunPayload.model_validate(data["startRun"])

    async def run(self, run_id: str) -> Run | None:
        """The run (None: no such run of this token's tenant)."""
        data = await self.execute(ops.GET_RUN, {"id": run_id})
        return None if data["run"] is None else Run.model_validate(data["run"])

    async def runs(
        self,
        *,
        first: int = 20,
        after: str | None = None,
        status: Sequence[RunStatus | str] | None = None,
        agent: str | None = None,
        created_since: datetime | None = None,
        created_before: datetime | None = None,
        order: RunOrder | str = RunOrder.NEWEST_FIRST,
        key: str | None = None,
        tags: Sequence[str] | None = None,
        top_level: bool | None = False,
        paused: bool | None = None,
        schedule_id: str | None = None,
    ) -> RunConnection:
        """One page of `runs`; `.runs` its runs, `.page_info.end_cursor` the next `after`."""
        variables = {
            "first": first,
            "after": after,
            "status": None if status is None else [str(s) for s in status],
            "agent": agent,
            "createdSince": None if created_since is None else created_since.isoformat(),
            "createdBefore": None if created_before is None else created_before.isoformat(),
            "order": str(order),
            "key": key,
            "tags": None if tags is None else list(tags),
            "topLevel": top_level,
            "paused": paused,
            "scheduleId": schedule_id,
        }
        data = await self.execute(ops.LIST_RUNS, variables)
        return RunConnection.model_validate(data["runs"])

    async def events(self, run_id: str, *, after: int = 0, first: int = 100) -> list[RunEvent]:
        data = await self.execute(ops.RUN_EVENTS, {"id": run_id, "after": after, "first": first})
        return [RunEvent.model_validate(e) for e in (data["run"] or {}).get("events", [])]

    async def steps(self, run_id: str, *, after: int = 0, first: int = 100) -> list[RunStep]:
        data = await self.execute(ops.RUN_STEPS, {"id": run_id, "after": after, "first": first})
        return [RunStep.model_validate(s) for s in (data["run"] or {}).get("steps", [])]

    async def cancel_run(self, run_id: str) -> Run:
        data = await self.execute(ops.CANCEL_RUN, {"id": run_id})
        return Run.model_validate(data["cancelRun"])

    async def signal_run(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        wait_id: str | None = None,
    ) -> SignalRunPayload:
        values = {
            "id": run_id,
            "name": name,
            "payload": payload,
            "idempotencyKey": idempotency_key,
            "waitId": wait_id,
        }
        data = await self.execute(ops.SIGNAL_RUN, {"input": values})
        return SignalRunPayload.model_validate(data["signalRun"])

    async def create_run_read_token(self, run_id: str, *, ttl_seconds: int = 3600) -> str:
        """A token that reads this one run, for `ttl_seconds` (hand it to a browser)."""
        data = await self.execute(ops.CREATE_RUN_READER, {"id": run_id, "ttlSeconds": ttl_seconds})
        token: str = data["createRunReadToken"]
        return token

    async def run_output(
        self, run_id: str, *, after: str | None = None
    ) -> AsyncIterator[OutputChunk]:
        """The run's partial output (`runOutput`): the chunks still kept after `after` (a
        chunk's `cursor`; None: from the start), then live ones, until the run settles. After a
        dropped connection, call again with the last cursor: no chunk twice, none missed."""
        from websockets.asyncio.client import connect

        url = self.base_url.replace("http", "ws", 1) + "/graphql"
        async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            await ws.send(
                json.dumps(
                    {
                        "type": "connection_init",
                        "payload": {"authorization": f"Bearer {self._token}"},
                    }
                )
            )
            ack = json.loads(await ws.recv())
            if ack.get("type") != "connection_ack":
                raise OutliveError([{"message": f"the socket was refused: {ack}"}])
            variables = {"id": run_id, "after": after}
            await ws.send(
                json.dumps(
                    {
                        "id": "1",
                        "type": "subscribe",
                        "payload": {"query": ops.RUN_OUTPUT, "variables": variables},
                    }
                )
            )
            async for raw in ws:
                message = json.loads(raw)
                kind = message.get("type")
                if kind == "next":
                    payload = message["payload"]
                    if payload.get("errors"):
                        raise OutliveError(payload["errors"])
                    yield OutputChunk.model_validate(payload["data"]["runOutput"])
                elif kind == "error":
                    raise OutliveError(message["payload"])
                elif kind == "complete":
                    return
                elif kind == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
