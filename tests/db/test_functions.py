"""The PL/pgSQL functions in `src/outlive/db/functions` are the ones the migrations install.

Each file is installed into a scratch schema (in a transaction that is rolled back), and
PostgreSQL's own rendering of it (`pg_get_functiondef`) is compared with that of the live
function in the migrated database, whitespace runs folded: a file edited without a migration
that installs the new text (or a migration that drifts from its file) fails here.

`outlive_dispatch_jobs` admits the outbox's rows: the kinds and tables it names must be those of
the registry (`services.outbox.KINDS`), which the relay and the repair path read.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from outlive.db import functions
from outlive.jobs.envelopes import ENVELOPES
from outlive.jobs.handlers import HANDLERS
from outlive.services import outbox
from outlive.services.relay import queries as relay_queries
from tests.support import Servers

SCRATCH = "outlive_function_check"
DEFINITION = """SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.proname LIKE 'outlive\\_%'"""


def _folded(definition: str, schema: str) -> str:
    return re.sub(r"\s+", " ", definition.replace(f"{schema}.", "")).strip()


async def _definitions(connection: asyncpg.Connection, schema: str) -> dict[str, str]:
    rows = await connection.fetch(DEFINITION, schema)
    return {row["name"]: _folded(row["definition"], schema) for row in rows}


@pytest.fixture
async def connection(servers: Servers) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(servers.database_url)
    yield connection
    await connection.close()


async def test_every_live_function_matches_its_source_file(
    connection: asyncpg.Connection,
) -> None:
    live = await _definitions(connection, "public")
    transaction = connection.transaction()
    await transaction.start()
    try:
        await connection.execute(f"CREATE SCHEMA {SCRATCH}")
        await connection.execute(f"SET LOCAL search_path = {SCRATCH}, public")
        for name in functions.names():
            await connection.execute(functions.source(name))
        from_files = await _definitions(connection, SCRATCH)
    finally:
        await transaction.rollback()
    assert sorted(from_files) == functions.names()  # each file defines the function it names
    assert sorted(live) == sorted(from_files), "a live function without a file, or the reverse"
    for name, definition in from_files.items():
        assert live[name] == definition, f"{name}: the migrated function differs from {name}.sql"


def test_a_changed_body_is_noticed() -> None:
    runs = _folded(functions.source("outlive_dispatch_runs"), "public")
    assert _folded(functions.source("outlive_dispatch_runs") + "\n\n", "public") == runs
    assert _folded(functions.source("outlive_dispatch_runs").replace("cap", "lid"), "x") != runs


def _outbox_drift(sql: str, kinds: tuple[outbox.OutboxKind, ...]) -> list[str]:
    """How `outlive_dispatch_jobs`'s source departs from the outbox registry `kinds`."""
    ctes = set(re.findall(r"\b(\w+) AS \(", sql))
    tables = set(re.findall(r"\b(?:FROM|UPDATE)\s+(\w+)", sql)) - ctes - {"tenants"}
    named = set(re.findall(r"\bc\.kind = '(\w+)'", sql))
    returned = set(re.findall(r"RETURNING '(\w+)'::text", sql))
    drift = []
    if tables != {k.table for k in kinds}:
        drift.append(f"tables {sorted(tables)} != {sorted(k.table for k in kinds)}")
    for found, what in ((named, "admitted"), (returned, "returned")):
        if found != {k.kind for k in kinds}:
            drift.append(f"{what} kinds {sorted(found)} != {sorted(k.kind for k in kinds)}")
    for k in kinds:
        if f"SELECT '{k.kind}'" not in sql and f"'{k.kind}' AS kind" not in sql:
            drift.append(f"{k.kind}: its waiting rows are not chosen")
    return drift


def test_the_dispatch_function_admits_the_outbox_registry_s_kinds() -> None:
    sql = functions.source("outlive_dispatch_jobs")
    assert _outbox_drift(sql, outbox.KINDS) == []
    extra = outbox.OutboxKind("sms", "texts", "sms.send.v1", "textId", "SENT", "sent_at", "x")
    assert _outbox_drift(sql, (*outbox.KINDS, extra)) != []  # a kind added to the registry only
    assert _outbox_drift(sql, outbox.KINDS[:1]) != []  # a kind left in the function only


def test_every_outbox_kind_has_its_job_and_is_relayed() -> None:
    relayed = {(kind, table, status) for kind, table, status in relay_queries.KINDS}
    for k in outbox.KINDS:
        assert k.job in HANDLERS, f"{k.kind}: no handler for {k.job}"
        assert k.job in ENVELOPES.payloads, f"{k.kind}: no envelope for {k.job}"
        assert (k.kind, k.table, outbox.PENDING) in relayed
