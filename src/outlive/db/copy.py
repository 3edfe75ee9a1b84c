"""A tenant's rows, copied from one cell's database to another's (`outlive tenant move`).

Every table that holds a tenant's rows is here, in the order of their foreign keys
(`TENANT_TABLES`, from the models: a table added later is covered, or `scope_of` raises until it
says how its rows belong to a tenant). A copy replaces the tenant's rows on the target: its old
ones are deleted (children first) and the source's are written with `COPY`, parents first, in one
transaction of the target, so a copy can run again (a resumed move, the tail) and the target
holds either the old copy or the new one, never half. The source is only read.

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


async def count_rows(conn: asyncpg.Connection, tenant_id: UUID) -> dict[str, int]:
    """The tenant's rows per table (what a dry run prints)."""
    counts = {}
    for table in TENANT_TABLES:
        sql = f"SELECT count(*) FROM {table.name} WHERE {scope_of(table)}"  # noqa: S608 (our names)
        counts[table.name] = int(await conn.fetchval(sql, tenant_id))
    return counts


async def delete_rows(conn: asyncpg.Connection, tenant_id: UUID) -> int:
    """Delete the tenant's rows, children first (the caller's transaction); how many."""
    deleted = 0
    for table in reversed(TENANT_TABLES):
        status = await conn.execute(
            f"DELETE FROM {table.name} WHERE {scope_of(table)}",  # noqa: S608 (our names)
            tenant_id,
        )
        deleted += int(status.rsplit(" ", 1)[-1])
    return deleted


async def copy_rows(
    source: asyncpg.Connection, target: asyncpg.Connection, tenant_id: UUID
) -> Copied:
    """Replace the tenant's rows on `target` with `source`'s, in one transaction of `target`
    (the source is read in one repeatable-read snapshot)."""
    started = time.perf_counter()
    rows: dict[str, int] = {}
    snapshot = source.transaction(isolation="repeatable_read", readonly=True)
    async with snapshot, target.transaction():
        await delete_rows(target, tenant_id)
        for table in TENANT_TABLES:
            columns = _columns(table)
            select = (
                f"SELECT {', '.join(columns)} FROM {table.name}"  # noqa: S608 (our names)
                f" WHERE {scope_of(table)} ORDER BY {_order(table)}"
            )
            records = await source.fetch(select, tenant_id)
            if records:
                await target.copy_records_to_table(table.name, records=records, columns=columns)
            rows[table.name] = len(records)
    return Copied(rows, time.perf_counter() - started)
