"""Fixtures of the service tests: `world`, a database of its own with the 5,000 test agents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.support import Servers

MANY = "tests.many_agents:AGENTS"


@dataclass
class World:
    settings: Settings
    sessions: Sessions
    database_url: str


@pytest.fixture
async def world(servers: Servers) -> AsyncIterator[World]:
    database_url = await servers.clone()
    settings = make_settings(servers, database_url=database_url, agent_modules=[MANY])
    engine = create_engine(database_url)
    yield World(settings, create_sessions(engine), database_url)
    await engine.dispose()
