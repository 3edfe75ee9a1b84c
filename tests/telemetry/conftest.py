"""Telemetry tests count what real workers did: spans, counters and logs."""

from __future__ import annotations

import pytest

from outlive.config import Settings
from tests.conftest import make_settings
from tests.support import Servers


@pytest.fixture
def settings(servers: Servers, own_database_url: str) -> Settings:
    """On a database of its own (see `own_database_url`): a worker must trace and count this
    test's work alone, not the PENDING rows earlier tests left behind."""
    return make_settings(servers, database_url=own_database_url)
