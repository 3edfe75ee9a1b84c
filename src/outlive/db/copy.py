"""A tenant's rows, copied from one cell's database to another's (`outlive tenant move`).

Every table that holds a tenant's rows is here, in the order of their foreign keys
(`TENANT_TABLES`, from the models: a table added later is covered, or `scope_of` raises until it
says how its rows belong to a tenant). A copy replaces the tenant's rows on the target: its old
ones are deleted (children first) and the source's are written, in one transaction of the
target, so a copy can run again (a resumed move, the tail) and the target holds either the old
copy or the new one, never half. The source is only read.

Three round trips whatever the number of tables, because a move's tail is copied while the
tenant's writes are held: one statement reads every table's rows as a JSON array (one snapshot),
one batch deletes the target's, one statement writes every table from its array
(`json_populate_recordset`; the foreign keys are checked at its end). With a statement per
table and `COPY`, 87 rows took 1.2 to 2 s to copy on the loaded machine; this way 76 to 189 rows
take 36 to 70 ms (docs/cells.md).

Ids are kept: they are UUIDs, unique across cells. The two identity columns (`run_signals.seq`,
`run_calls.seq`) are the target's to number: their rows are written in their order without them
(a signal's order among its run's is what the seq is for; a call row's seq is held only by the
attempt in flight, and a move copies its tail once no run of the tenant is running).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from uuid import UUID

import asyncpg
from sqlalchemy import Table

from outlive.db.models import Base

SHARED = frozenset({"liveness_locks", "rejected_jobs", "usage_rollups"})  # no tenant's rows
_VIA = {"runs": "run_id", "budgets": "budget_id"}  # a child table's way to its tenant


def scope_of(table: Table) -> str:
    """The `WHERE` that selects the tenant's (`$1`) rows of `table`."""
    if table.name == "tenants":
        return "id = $1"
    if "tenant_id" in table.columns:
        return "tenant_id = $1"
    for parent, column in _VIA.items():
        if column in table.columns:
            return f"{column} IN (SELECT id FROM {parent} WHERE tenant_id = $1)"  # noqa: S608
    raise LookupError(f"table {table.name}: how do its rows belong to a tenant?")


def _tables() -> list[Table]:
    tables = [t for t in Base.metadata.sorted_tables if t.name not in SHARED]
    for table in tables:
        scope_of(table)  # every table says how (at import: a new table cannot be forgotten)
    return tables


TENANT_TABLES = _tables()


def _columns(table: Table) -> list[str]:
    """The columns written: all but a `GENERATED ALWAYS` identity (the target numbers it)."""
    return [c.name for c in table.columns if c.identity is None]


def _order(table: Table) -> str:
    return ", ".join(c.name for c in table.primary_key.columns)


@dataclass(frozen=True, slots=True)
class Copied:
    rows: dict[str, int]  # table -> rows written
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _counts() -> str:
    counts = (
        f"(SELECT count(*) FROM {t.name} WHERE {scope_of(t)}) AS {t.name}"  # noqa: S608
        for t in TENANT_TABLES
    )
    return "SELECT " + ", ".join(counts)


def _reads() -> str:
    """One statement: each table's rows of the tenant, as a JSON array, in key order."""
    reads = (
        f"(SELECT coalesce(json_agg(x), '[]') FROM (SELECT {', '.join(_columns(t))}"  # noqa: S608
        f" FROM {t.name} WHERE {scope_of(t)} ORDER BY {_order(t)}) x) AS {t.name}"
        for t in TENANT_TABLES
    )
    return "SELECT " + ", ".join(reads)


def _writes() -> str:
    """One statement: every table's rows written from its JSON array (`$n`, in the order of
    `TENANT_TABLES`); the foreign keys are checked once, at its end."""
    writes = []
    for n, table in enumerate(TENANT_TABLES, start=1):
        columns = ", ".join(_columns(table))
        writes.append(
            f"w{n} AS (INSERT INTO {table.name} ({columns}) SELECT {columns}"  # noqa: S608
            f" FROM json_populate_recordset(NULL::{table.name}, ${n}::json) WITH ORDINALITY r"
            " ORDER BY r.ordinality RETURNING 1)"
        )
    counts = ", ".join(f"(SELECT count(*) FROM w{n})" for n in range(1, len(writes) + 1))  # noqa: S608
    return f"WITH {', '.join(writes)} SELECT {counts}"


_COUNTS, _READS, _WRITES = _counts(), _reads(), _writes()


def _deletes(tenant_id: UUID) -> str:
    """The deletes, children first, as one simple query (one round trip). The id is inlined:
    a `UUID`'s text, nothing a caller wrote."""
    literal = f"'{UUID(str(tenant_id))}'::uuid"
    return "; ".join(
        f"DELETE FROM {t.name} WHERE {scope_of(t).replace('$1', literal)}"  # noqa: S608
        for t in reversed(TENANT_TABLES)
    )


async def count_rows(conn: asyncpg.Connection, tenant_id: UUID) -> dict[str, int]:
    """The tenant's rows per table (what a dry run prints), in one statement."""
    row = await conn.fetchrow(_COUNTS, tenant_id)
    return {t.name: int(row[t.name]) for t in TENANT_TABLES}


async def delete_rows(conn: asyncpg.Connection, tenant_id: UUID) -> int:
    """Delete the tenant's rows, children first (the caller's transaction); how many."""
    deleted = sum((await count_rows(conn, tenant_id)).values())
    await conn.execute(_deletes(tenant_id))
    return deleted


async def read_rows(conn: asyncpg.Connection, tenant_id: UUID) -> list[str]:
    """Each table's rows of the tenant as a JSON array (text), in `TENANT_TABLES`' order: one
    statement, so one snapshot."""
    read = await conn.fetchrow(_READS, tenant_id)
    return [read[t.name] for t in TENANT_TABLES]


async def copy_rows(
    source: asyncpg.Connection, target: asyncpg.Connection, tenant_id: UUID
) -> Copied:
    """Replace the tenant's rows on `target` with `source`'s, in one transaction of `target`
    (the source read in one statement, the target written in two: a move's tail is held, and
    each round trip counts)."""
    started = time.perf_counter()
    arrays = await read_rows(source, tenant_id)
    async with target.transaction():
        await target.execute(_deletes(tenant_id))
        written = await target.fetchrow(_WRITES, *arrays)
    rows = {t.name: int(written[n]) for n, t in enumerate(TENANT_TABLES)}
    return Copied(rows, time.perf_counter() - started)
