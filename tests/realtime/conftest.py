"""Fixtures for the realtime tests: the API served by a real uvicorn, and a GraphQL client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from outlive.config import Settings
from tests.realtime.clients import Served, serve
from tests.support import Api


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[Served]:
    async with serve(settings) as served:
        yield served


@pytest.fixture
async def http(served: Served) -> AsyncIterator[Api]:
    """GraphQL over HTTP to the served API (the same process as its sockets)."""
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        yield Api(client)
