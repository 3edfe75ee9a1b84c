"""The directory: which cell (a PostgreSQL primary, its `DATABASE_URL`) holds each tenant.

A small PostgreSQL database of its own (`OUTLIVE_DIRECTORY_URL`; unset: one cell, DATABASE_URL,
exactly the deployment before cells). It maps each tenant to one of `SLOTS` virtual slots and
each slot to a cell. Its schema is its own, made by `outlive directory init` (`ensure_schema`,
idempotent; `directory_meta.revision` says which, "0051"), not by the cells' Alembic chain: a
cell's database never holds the directory and the directory never holds a tenant's rows.

- `cells(name, database_url)`: the cells; `default` is the one whose queues keep their names.
- `slots(slot, cell, version)`: every slot of 0..1023 on one cell.
- `tenants(tenant_id, slug, slot, held_since, version)`: a tenant's slot; `held_since` while a
  move holds its writes (`outlive tenant move`). A tenant with no row is on the default cell
  (every tenant made before the directory was, and every one made on the default cell).
- `viewers(id, seen_version, seen_at)`: each API process's acknowledgement of the directory's
  changes it applied (after the requests it had in flight for a held tenant finished): a move
  waits for every live viewer before it copies the tail.
- `moves(tenant_id, …, phase)`: a move in progress, so an interrupted one resumes.

Every change takes a new `version` from one sequence: a process reads only the rows changed
since the last version it saw (`DirectoryView` in `outlive.db.directory_view`), and NOTIFYs
`CHANNEL` (revision 0051: run `outlive directory init` again on a directory made before it), so
a process reads a change when it is made instead of on its next poll.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from outlive.config import DEFAULT_CELL
from outlive.db import primary
from outlive.db.raw import keep_session
from outlive.ids import SLOTS, TenantId, home_slot

REVISION = "0051"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS directory_meta (revision text PRIMARY KEY);
CREATE SEQUENCE IF NOT EXISTS directory_versions;
CREATE TABLE IF NOT EXISTS cells (
    name text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    database_url text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS slots (
    slot int PRIMARY KEY CHECK (slot >= 0 AND slot < 1024),
    cell text NOT NULL REFERENCES cells (name),
    version bigint NOT NULL DEFAULT nextval('directory_versions'));
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id uuid PRIMARY KEY,
    slug text NOT NULL UNIQUE,
    slot int NOT NULL REFERENCES slots (slot),
    held_since timestamptz,
    version bigint NOT NULL DEFAULT nextval('directory_versions'));
CREATE INDEX IF NOT EXISTS ix_tenants_version ON tenants (version);
CREATE TABLE IF NOT EXISTS old_tokens (
    token_hash bytea PRIMARY KEY,
    tenant_id uuid NOT NULL REFERENCES tenants (tenant_id) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS ix_old_tokens_tenant ON old_tokens (tenant_id);
CREATE TABLE IF NOT EXISTS viewers (
    id text PRIMARY KEY,
    seen_version bigint NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS moves (
    tenant_id uuid PRIMARY KEY,
    slug text NOT NULL,
    source text NOT NULL REFERENCES cells (name),
    target text NOT NULL REFERENCES cells (name),
    phase text NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    started_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO directory_meta (revision) VALUES ('0048') ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION directory_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outlive_directory', '');
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS directory_changed ON tenants;
CREATE TRIGGER directory_changed AFTER INSERT OR UPDATE OR DELETE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION directory_changed();
DROP TRIGGER IF EXISTS directory_changed ON slots;
CREATE TRIGGER directory_changed AFTER INSERT OR UPDATE OR DELETE ON slots
    FOR EACH STATEMENT EXECUTE FUNCTION directory_changed();
INSERT INTO directory_meta (revision) VALUES ('0051') ON CONFLICT DO NOTHING;
"""
CHANNEL = "outlive_directory"  # NOTIFYed by every change of `tenants` or `slots` (a trigger)


@dataclass(frozen=True, slots=True)
class Cell:
    name: str
    database_url: str


@dataclass(frozen=True, slots=True)
class Placement:
    """A tenant's row: its slot's cell, and whether a move holds its writes."""

    tenant_id: TenantId
    slug: str
    cell: str
    held: bool
    version: int


_PLACEMENTS = (
    "SELECT t.tenant_id, t.slug, s.cell, t.held_since IS NOT NULL AS held,"
    " greatest(t.version, s.version) AS version FROM tenants t JOIN slots s USING (slot)"
)


class Directory:
    """The directory database, on a small pool (one or two connections: a few statements a
    second per process)."""

    def __init__(self, pool: asyncpg.Pool, url: str) -> None:
        self.pool = pool
        self.url = url

    @classmethod
    async def open(cls, url: str, *, max_size: int = 2) -> Directory:
        pool = await asyncpg.create_pool(  # no session state: its locks are transactions'
            url, connect=primary.connect, min_size=0, max_size=max_size, reset=keep_session
        )
        return cls(pool, url)

    async def listen(self, changed: Callable[[], object]) -> asyncpg.Connection:
        """A connection of its own (outside the pool) that calls `changed` on every change of
        the directory's placements (`CHANNEL`); the caller closes it."""
        conn = await primary.connect(
            self.url, server_settings={"application_name": "outlive-directory"}
        )
        try:
            await conn.add_listener(CHANNEL, lambda *_: changed())
        except BaseException:
            await conn.close()
            raise
        return conn

    async def close(self) -> None:
        await self.pool.close()

    async def ensure_schema(self, default_url: str) -> None:
        """The directory's tables, and the default cell (`default_url`) with every slot, when
        there is no cell yet (idempotent)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(48)")  # two inits at once
            await conn.execute(_SCHEMA)
            if await conn.fetchval("SELECT count(*) FROM cells") == 0:
                await conn.execute(
                    "INSERT INTO cells (name, database_url) VALUES ($1, $2)",
                    DEFAULT_CELL,
                    default_url,
                )
                await conn.execute(
                    "INSERT INTO slots (slot, cell) SELECT g, $1 FROM generate_series(0, $2) g",
                    DEFAULT_CELL,
                    SLOTS - 1,
                )

    async def cells(self) -> list[Cell]:
        rows = await self.pool.fetch("SELECT name, database_url FROM cells ORDER BY name")
        return [Cell(r["name"], r["database_url"]) for r in rows]

    async def add_cell(self, name: str, database_url: str, slots: Sequence[int] = ()) -> None:
        """Register a cell (its URL replaced when it exists) and give it `slots`: new tenants
        placed by their home slot land there (`place`); existing tenants stay where they are
        until moved (a slot's tenants do not follow their slot: each tenant has its row)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO cells (name, database_url) VALUES ($1, $2)"
                " ON CONFLICT (name) DO UPDATE SET database_url = excluded.database_url",
                name,
                database_url,
            )
            if slots:
                await conn.execute(
                    "UPDATE slots SET cell = $1, version = nextval('directory_versions')"
                    " WHERE slot = ANY($2::int[])",
                    name,
                    list(slots),
                )

    async def placements(self, since: int = 0) -> list[Placement]:
        """The tenants' rows changed after version `since` (all of them with 0)."""
        rows = await self.pool.fetch(f"{_PLACEMENTS} WHERE t.version > $1 OR s.version > $1", since)
        return [_placement(r) for r in rows]

    async def placement(self, tenant_id: UUID) -> Placement | None:
        row = await self.pool.fetchrow(f"{_PLACEMENTS} WHERE t.tenant_id = $1", tenant_id)
        return None if row is None else _placement(row)

    async def by_slug(self, slug: str) -> Placement | None:
        row = await self.pool.fetchrow(f"{_PLACEMENTS} WHERE t.slug = $1", slug)
        return None if row is None else _placement(row)

    async def place(self, tenant_id: UUID, slug: str, cell: str) -> int:
        """Put the tenant on `cell` (its row's slot: its home slot when that slot is the cell's,
        else the cell's slot nearest after it), releasing any hold; the new version."""
        version = await self.pool.fetchval(
            "WITH slot AS (SELECT slot FROM slots WHERE cell = $3"
            " ORDER BY (slot - $4 + 1024) % 1024 LIMIT 1)"
            " INSERT INTO tenants (tenant_id, slug, slot) SELECT $1, $2, slot FROM slot"
            " ON CONFLICT (tenant_id) DO UPDATE SET slot = excluded.slot, slug = excluded.slug,"
            " held_since = NULL, version = nextval('directory_versions') RETURNING version",
            tenant_id,
            slug,
            cell,
            home_slot(tenant_id),
        )
        if version is None:
            raise LookupError(f"cell {cell!r} has no slot: give it some with `outlive cell add`")
        return int(version)

    async def keep_old_tokens(self, tenant_id: UUID, hashes: Sequence[bytes]) -> None:
        """Replace the tenant's `old_tokens`: the hashes of its tokens, which a token made
        before tokens named their tenant is routed by (docs/cells.md). Written by a move before
        its hold and again before its flip; each viewer reloads them with the tenant's row."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM old_tokens WHERE tenant_id = $1", tenant_id)
            await conn.execute(
                "INSERT INTO old_tokens (token_hash, tenant_id)"
                " SELECT h, $1 FROM unnest($2::bytea[]) h"
                " ON CONFLICT (token_hash) DO UPDATE SET tenant_id = excluded.tenant_id",
                tenant_id,
                list(hashes),
            )

    async def old_tokens(self, tenant_ids: Sequence[UUID] | None = None) -> dict[bytes, TenantId]:
        """Token hash -> tenant, of `tenant_ids` (every tenant's with None)."""
        if tenant_ids is None:
            rows = await self.pool.fetch("SELECT token_hash, tenant_id FROM old_tokens")
        else:
            rows = await self.pool.fetch(
                "SELECT token_hash, tenant_id FROM old_tokens WHERE tenant_id = ANY($1::uuid[])",
                list(tenant_ids),
            )
        return {bytes(r["token_hash"]): TenantId(r["tenant_id"]) for r in rows}

    async def hold(self, tenant_id: UUID, *, held: bool) -> int:
        """Hold (or release) the tenant's writes; the new version (every viewer must see it)."""
        version = await self.pool.fetchval(
            "UPDATE tenants SET held_since = CASE WHEN $2 THEN coalesce(held_since, now()) END,"
            " version = nextval('directory_versions') WHERE tenant_id = $1 RETURNING version",
            tenant_id,
            held,
        )
        if version is None:
            raise LookupError(f"tenant {tenant_id} has no row in the directory")
        return int(version)

    async def version(self) -> int:
        return int(await self.pool.fetchval("SELECT last_value FROM directory_versions"))

    async def ack(self, viewer: str, version: int) -> None:
        await self.pool.execute(
            "INSERT INTO viewers (id, seen_version) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE"
            " SET seen_version = excluded.seen_version, seen_at = now()",
            viewer,
            version,
        )

    async def forget(self, viewer: str) -> None:
        await self.pool.execute("DELETE FROM viewers WHERE id = $1", viewer)

    async def lagging(self, version: int, live_s: float) -> list[str]:
        """The live viewers (seen within `live_s`) that have not acknowledged `version` yet. A
        viewer silent longer than that refuses to route (its view is stale: 503)."""
        rows = await self.pool.fetch(
            "SELECT id FROM viewers WHERE seen_version < $1"
            " AND seen_at > now() - make_interval(secs => $2)",
            version,
            live_s,
        )
        return [r["id"] for r in rows]

    async def move(self, tenant_id: UUID) -> dict[str, Any] | None:
        row = await self.pool.fetchrow("SELECT * FROM moves WHERE tenant_id = $1", tenant_id)
        return None if row is None else dict(row)

    async def set_move(
        self, tenant_id: UUID, slug: str, source: str, target: str, phase: str, paused: bool
    ) -> None:
        await self.pool.execute(
            "INSERT INTO moves (tenant_id, slug, source, target, phase, paused)"
            " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant_id) DO UPDATE"
            " SET phase = excluded.phase, paused = excluded.paused, updated_at = now()",
            tenant_id,
            slug,
            source,
            target,
            phase,
            paused,
        )

    async def end_move(self, tenant_id: UUID) -> None:
        await self.pool.execute("DELETE FROM moves WHERE tenant_id = $1", tenant_id)

    async def held_since(self, tenant_id: UUID) -> datetime | None:
        value: datetime | None = await self.pool.fetchval(
            "SELECT held_since FROM tenants WHERE tenant_id = $1", tenant_id
        )
        return value


def _placement(row: asyncpg.Record) -> Placement:
    return Placement(
        tenant_id=TenantId(row["tenant_id"]),
        slug=row["slug"],
        cell=row["cell"],
        held=row["held"],
        version=int(row["version"]),
    )
