"""Retention covers blobs (issue 46): once no run holds a blob, the retention task deletes it,
after a grace that protects a writer sharing those bytes again; a blob a run still holds, and
another tenant's blob of the same bytes, stay."""

from __future__ import annotations

import json
import os

from sqlalchemy import text

from outlive.db.tx import Sessions
from outlive.services import blobs, retention
from tests.support import TenantHandle

_RUN = text(
    "INSERT INTO runs (tenant_id, agent, status, input, created_at, finished_at)"
    " VALUES (:t, 'demo', 'SUCCEEDED', '{}', now() - interval '40 days',"
    " now() - interval '40 days') RETURNING id"
)
_AGE_BLOBS = text("UPDATE blobs SET created_at = now() - interval '1 hour' WHERE tenant_id = :t")
_COUNT = text("SELECT count(*) AS n FROM blobs WHERE tenant_id = :t")
_PARTS = text("SELECT count(*) AS n FROM blob_parts WHERE tenant_id = :t")


async def new_run(sessions: Sessions, tenant: TenantHandle) -> object:
    row = await sessions.one(_RUN, t=tenant.id)
    assert row is not None
    return row["id"]


async def count(sessions: Sessions, statement: object, tenant: TenantHandle) -> int:
    row = await sessions.one(statement, t=tenant.id)  # type: ignore[arg-type]
    return 0 if row is None else int(row["n"])


async def test_a_blob_nobody_holds_is_swept_with_its_runs(
    sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    value = json.dumps(os.urandom(200_000).hex())  # 400 KB of JSON: over the threshold
    old = await new_run(sessions, tenant)
    theirs = await new_run(sessions, other_tenant)
    ref = await blobs.store_text(sessions, tenant.id, old, value)  # type: ignore[arg-type]
    assert await blobs.store_text(sessions, other_tenant.id, theirs, value) == ref  # type: ignore[arg-type]
    assert await blobs.read_text(sessions, tenant.id, ref) == value
    assert await count(sessions, _PARTS, tenant) == -(-len(value) // blobs.PART_BYTES)
    await retention.set_retention(sessions, other_tenant.id, 3650)  # theirs is kept

    await retention.prune_runs(sessions, days=30)  # the run goes; its blob is in its grace
    assert await count(sessions, _COUNT, tenant) == 1
    await sessions.execute(_AGE_BLOBS, t=tenant.id)
    await sessions.execute(_AGE_BLOBS, t=other_tenant.id)
    await retention.prune_runs(sessions, days=30)
    assert await count(sessions, _COUNT, tenant) == 0
    assert await count(sessions, _PARTS, tenant) == 0
    assert await count(sessions, _COUNT, other_tenant) == 1  # its run still holds it
    assert await blobs.read_text(sessions, other_tenant.id, ref) == value
