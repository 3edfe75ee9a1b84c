"""A tag is matched within its tenant through `outlive_tenant_tags` and the GIN index
`ix_runs_tenant_tags` (migrations 0021 and 0048), by the runs list and by `eraseSubject` alike.

The index's key prefixes each tag with its tenant's id, so the match alone (no `tenant_id =`)
must never reach another tenant's runs, nor a run whose tag merely contains the one asked (a
rewrite of the function that joins and splits the tags would match "a" in "a,b"). And the
erasure's lookup must read the index: without the index's predicate (`tags <> '{}'`) it tested
every run of the tenant with the function instead (docs/governance.md, "The longest statement")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.services import erasure
from outlive.services.runs import read_runs
from outlive.services.runs.page_queries import tags_match
from tests.conftest import new_tenant
from tests.services.conftest import World

# The match alone, as the index sees it: no `tenant_id =` to hide a tenant the encoding lets in.
MATCH_ONLY = prepare(text("SELECT id FROM runs WHERE " + tags_match("CAST(:tags AS varchar[])")))  # noqa: S608

# Tags the API refuses (only [A-Za-z0-9:_.@/-] are taken) but the SQL function must still keep
# apart: separators, array-literal characters, quotes, spaces and non-ASCII.
ODD = ["a,b", "a", "b", '{"q"}', "with space", "ü/ß:x", "x\\y", ""]


async def insert(conn: asyncpg.Connection, tenant: UUID, tags: list[str]) -> UUID:
    run_id: UUID = await conn.fetchval(
        "INSERT INTO runs (tenant_id, agent, input, status, tags)"
        " VALUES ($1, 'demo', '{}', 'SUCCEEDED', $2::varchar[]) RETURNING id",
        tenant,
        tags,
    )
    return run_id


async def test_a_tag_matches_its_tenants_runs_carrying_it_and_no_other(world: World) -> None:
    """Through the index's expression alone, the erasure's lookup and the runs list: a run is
    found by a tag it carries whole, in its own tenant; never by another tenant's, by part of a
    tag, or by a tag that spells another tenant's prefix."""
    a = await new_tenant(world.sessions, "tags-a")
    b = await new_tenant(world.sessions, "tags-b")
    conn = await asyncpg.connect(world.database_url)
    try:
        carried: dict[UUID, tuple[UUID, list[str]]] = {}
        for tenant in (a.id, b.id):
            for tags in ([t] for t in ODD):
                carried[await insert(conn, tenant, tags)] = (tenant, tags)
            for tags in (["user:x", "other"], ["user:xy"], ["user"], [f"{b.id}:user:x"], []):
                carried[await insert(conn, tenant, tags)] = (tenant, tags)
    finally:
        await conn.close()
    for tenant in (a.id, b.id):
        for tag in [*ODD, "user:x", "user", f"{b.id}:user:x", f"{a.id}:user:x"]:
            wanted = {i for i, (t, tags) in carried.items() if t == tenant and tag in tags}
            found = await world.sessions.all(MATCH_ONLY, tenant_id=tenant, tags=[tag])
            assert {r["id"] for r in found} == wanted, (tenant, tag)
            began = datetime.now(UTC)
            page = await world.sessions.all(
                erasure._NEXT, tenant_id=tenant, tag=tag, began=began, batch=100
            )
            assert {r["id"] for r in page} == wanted, (tenant, tag)
        listed = await read_runs(world.sessions, tenant, first=50, tags=["user:x", "other"])
        assert {r.id for r in listed.runs} == {
            i for i, (t, tags) in carried.items() if t == tenant and tags == ["user:x", "other"]
        }


async def test_the_erasures_lookup_reads_the_tags_gin_index(world: World) -> None:
    """The subject's runs are most of its tenant's: the lookup is a Bitmap Index Scan of the
    tag's entries in `ix_runs_tenant_tags` (ANDed with the tenant's, or alone), estimated near
    what it finds (statistics on the index's expression, migration 0048), not a walk of the
    tenant's runs testing each with the function."""
    subject, other = await new_tenant(world.sessions, "subject"), await new_tenant(world.sessions)
    conn = await asyncpg.connect(world.database_url)
    try:
        await conn.execute(
            "INSERT INTO runs (tenant_id, agent, input, status, tags)"
            " SELECT t, 'demo', '{}', 'SUCCEEDED', ARRAY[tag]::varchar[]"
            " FROM (VALUES ($1::uuid, 'user:subject', 3000), ($1::uuid, 'user:1', 100),"
            "             ($2::uuid, 'user:subject', 3000)) AS v(t, tag, n),"
            " generate_series(1, n)",
            subject.id,
            other.id,
        )
        await conn.execute("ANALYZE runs")
        params = {"tenant_id": subject.id, "tag": "user:subject", "began": datetime.now(UTC)}
        params |= {"batch": erasure.PAGE}
        plan = await conn.fetch(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + erasure._NEXT.sql, *erasure._NEXT.args(params)
        )
    finally:
        await conn.close()
    nodes = walk(json.loads(plan[0][0])[0]["Plan"])
    scans = [n for n in nodes if n.get("Index Name") == "ix_runs_tenant_tags"]
    assert [n["Node Type"] for n in scans] == ["Bitmap Index Scan"], nodes
    assert scans[0]["Actual Rows"] == 3000
    assert scans[0]["Plan Rows"] >= 1000, "the estimate is the default 0.5%: no statistics"
    assert not any("outlive_tenant_tags" in n.get("Filter", "") for n in nodes)


def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan's node and every node under it."""
    found = [node]
    for child in node.get("Plans", []):
        found += walk(child)
    return found
