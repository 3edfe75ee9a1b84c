"""Fuzzing the WebSocket (graphql-transport-ws) on a real uvicorn socket: random frames after an
acknowledged `connection_init` (or none). Whatever is sent, the server either still answers a
ping or closes with a code of the protocol (4400, 4401, 4403, 4409, 4429, 1009…), never drops
the connection (1006) or fails (1011); no ERROR line anywhere."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from outlive.config import Settings
from outlive.graphql.schema import served_schema
from tests.fuzz.conftest import Errors, budget
from tests.fuzz.strategies import FRAMES, operations
from tests.realtime.clients import Served, Socket, serve
from tests.support import TenantHandle

pytestmark = pytest.mark.timeout(300)

SCHEMA = served_schema(Settings.model_construct())._schema
BROKEN = {1006, 1011}


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[Served]:
    async with serve(settings) as served:
        yield served


async def outcome(sock: Socket) -> tuple[str, int | None]:
    """("pong", None) when the socket still answers a ping, else ("closed", its code)."""
    try:
        await sock.ws.send(json.dumps({"type": "ping"}))
        async with asyncio.timeout(10):
            while True:
                frame = await sock.ws.recv()
                if isinstance(frame, str) and json.loads(frame).get("type") == "pong":
                    return "pong", None
    except ConnectionClosed:
        pass
    received = sock.ws.protocol.close_rcvd
    return "closed", received.code if received is not None else 1006


@budget(600)
@given(frames=st.lists(FRAMES, min_size=1, max_size=4), init=st.booleans())
async def test_random_frames(
    served: Served, tenant: TenantHandle, errors: Errors, frames: list[Any], init: bool
) -> None:
    async with Socket.open(served.url, token=tenant.token if init else None) as sock:
        try:
            for frame in frames:
                await sock.ws.send(frame)
        except ConnectionClosed:
            pass
        state, code = await outcome(sock)
    assert code not in BROKEN, (state, code)


@budget(400)
@given(operation=operations(SCHEMA), id=st.text(min_size=1, max_size=300))
async def test_subscribe_with_operations_from_the_schema(
    served: Served,
    tenant: TenantHandle,
    errors: Errors,
    operation: tuple[str, dict[str, Any]],
    id: str,
) -> None:
    document, variables = operation
    async with Socket.open(served.url, token=tenant.token) as sock:
        payload = {"query": document, "variables": variables}
        message = {"type": "subscribe", "id": id, "payload": payload}
        try:
            await sock.send(message)
            await sock.send(message)  # a duplicate id: 4409, with a reason that fits
        except ConnectionClosed:
            pass
        state, code = await outcome(sock)
    assert code not in BROKEN, (state, code)
