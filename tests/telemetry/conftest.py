"""Telemetry tests count what real workers did: spans, counters and logs."""

from __future__ import annotations

import pytest

from tests.conftest import with_own_database
from tests.support import Servers


@pytest.fixture
async def servers(servers: Servers) -> Servers:
    """Every test here runs on a database of its own (see `with_own_database`)."""
    return await with_own_database(servers)
