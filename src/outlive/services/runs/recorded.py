"""What `outlive replay` reads: recorded runs with everything their code asked for (issue 43).

A page of runs (filtered by agent, status, age, tenant), then, for the whole page, their steps
(in completion order, with the code version that recorded each), their sleeps and waits and
their children, in four statements of one READ ONLY transaction: replay writes nothing. A step
result or a child's output stored as a blob (a reference, `services.blobs`) is resolved by a fifth
statement of the same transaction, once per page for every blob the page's runs refer to (a blob
fifty steps share is read once). The run's own output stays as stored (replay does not read it).
With the deployment key, what a tenant that encrypts sealed is opened (`services.sealing`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import ARRAY, LargeBinary, String, Uuid, bindparam, text

from outlive.db.raw import prepare
from outlive.db.tx import Db, Sessions
from outlive.services import blobs, sealing
from outlive.services.runs.queries import RUN_COLUMNS
from outlive.services.runs.records import RunRecord, to_record

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PAGE = 500  # runs read per round trip


@dataclass(frozen=True, slots=True)
class Filters:
    agent: str | None = None
    statuses: Sequence[str] = ()  # empty: every status
    newer_than: datetime | None = None  # created at or after
    older_than: datetime | None = None  # created at or before
    tenant: str | None = None  # a tenant's slug
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class Wait:
    resolved: bool
    by: str | None
    payload: Any


@dataclass(frozen=True, slots=True)
class Child:
    id: UUID
    status: str
    output: Any
    error: str | None


@dataclass(slots=True)
class Recorded:
    """One run as recorded: its steps ((name, occurrence) -> result as JSON text, in completion
    order), the code versions that recorded them, its waits ((kind, name, occurrence)) and its
    children (by their step under it, "name#k" or "name#k[i]")."""

    run: RunRecord
    steps: dict[tuple[str, int], str] = field(default_factory=dict)
    versions: set[str | None] = field(default_factory=set)
    waits: dict[tuple[str, str, int], Wait] = field(default_factory=dict)
    children: dict[str, Child] = field(default_factory=dict)


_IDS = bindparam("ids", type_=ARRAY(Uuid()))
RUNS = prepare(
    text(
        "SELECT r.* FROM runs r"
        " WHERE (CAST(:agent AS text) IS NULL OR r.agent = :agent)"
        " AND (cardinality(CAST(:statuses AS text[])) = 0 OR r.status = ANY (:statuses))"
        " AND (CAST(:newer AS timestamptz) IS NULL OR r.created_at >= :newer)"
        " AND (CAST(:older AS timestamptz) IS NULL OR r.created_at <= :older)"
        " AND (CAST(:tenant AS text) IS NULL"
        "      OR r.tenant_id = (SELECT id FROM tenants WHERE slug = :tenant))"
        " AND (CAST(:after AS timestamptz) IS NULL OR (r.created_at, r.id)"
        "      < (CAST(:after AS timestamptz), CAST(:after_id AS uuid)))"
        " ORDER BY r.created_at DESC, r.id DESC LIMIT :page"
    )
    .bindparams(bindparam("statuses", type_=ARRAY(String())))
    .columns(*RUN_COLUMNS)
)
STEPS = prepare(
    text(
        "SELECT run_id, name, occurrence, result::text AS result, code_version FROM run_steps"
        " WHERE run_id = ANY (:ids) ORDER BY run_id, seq"
    ).bindparams(_IDS)
)
WAITS = prepare(
    text(
        "SELECT run_id, kind, name, occurrence, resolved_at IS NOT NULL AS resolved,"
        " resolved_by, payload::text AS payload FROM run_waits WHERE run_id = ANY (:ids)"
    ).bindparams(_IDS)
)
CHILDREN = prepare(
    text(
        "SELECT parent_id, parent_step, id, status, output::text AS output, error FROM runs"
        " WHERE parent_id = ANY (:ids)"
    ).bindparams(_IDS)
)

BLOBS = prepare(
    text(
        "SELECT tenant_id, sha256, string_agg(data, '' ORDER BY part) AS data FROM blob_parts"
        " WHERE (tenant_id, sha256) IN (SELECT * FROM unnest(:tenants, :shas))"
        " GROUP BY tenant_id, sha256"
    ).bindparams(
        bindparam("tenants", type_=ARRAY(Uuid())), bindparam("shas", type_=ARRAY(LargeBinary()))
    )
)


def _json(value: str | None) -> Any:
    return None if value is None else json.loads(value)


async def read_recorded(
    sessions: Sessions, filters: Filters, *, kek: AESGCM | None = None
) -> list[Recorded]:
    """The runs `filters` pick, newest first, each with what it recorded (read only). `kek`:
    the deployment key, to open the step results of tenants that encrypt (`services.sealing`)."""
    found: list[Recorded] = []
    after: tuple[datetime, UUID] | None = None
    while len(found) < filters.limit:
        page = await _page(sessions, filters, after, min(PAGE, filters.limit - len(found)), kek)
        found += page
        if len(page) < PAGE:
            break
        after = (page[-1].run.created_at, page[-1].run.id)
    return found


async def _page(
    sessions: Sessions,
    filters: Filters,
    after: tuple[datetime, UUID] | None,
    size: int,
    kek: AESGCM | None,
) -> list[Recorded]:
    async with sessions.unit() as uow:
        await uow.execute(text("SET TRANSACTION READ ONLY"))
        rows = await uow.all(
            RUNS,
            agent=filters.agent,
            statuses=list(filters.statuses),
            newer=filters.newer_than,
            older=filters.older_than,
            tenant=filters.tenant,
            after=None if after is None else after[0],
            after_id=None if after is None else after[1],
            page=size,
        )
        runs = {row["id"]: Recorded(to_record(row)) for row in rows}
        if not runs:
            return []
        ids = list(runs)
        for row in await uow.all(STEPS, ids=ids):
            recorded = runs[row["run_id"]]
            recorded.steps[row["name"], row["occurrence"]] = row["result"]
            recorded.versions.add(row["code_version"])
        for row in await uow.all(WAITS, ids=ids):
            wait = Wait(row["resolved"], row["resolved_by"], _json(row["payload"]))
            runs[row["run_id"]].waits[row["kind"], row["name"], row["occurrence"]] = wait
        for row in await uow.all(CHILDREN, ids=ids):
            child = Child(row["id"], row["status"], _json(row["output"]), row["error"])
            runs[row["parent_id"]].children[row["parent_step"]] = child
        await _resolve_blobs(uow, list(runs.values()))
        if kek is not None:
            await _open_sealed(uow, kek, list(runs.values()))
    return list(runs.values())


def _step_ref(result: str | None) -> bytes | None:
    if result is None or not blobs.is_ref_text(result):
        return None
    return bytes.fromhex(str(blobs.ref_of(json.loads(result))))


def _child_ref(child: Child) -> bytes | None:
    ref = blobs.ref_of(child.output)
    return None if ref is None else bytes.fromhex(ref)


async def _resolve_blobs(db: Db, runs: Collection[Recorded]) -> None:
    """Step results and children's outputs that are blob references, replaced by their values
    (read in one statement). A reference whose blob is gone is left as it is."""
    wanted: dict[tuple[UUID, bytes], str | None] = {}
    for recorded in runs:
        refs = [_step_ref(r) for r in recorded.steps.values()]
        refs += [_child_ref(c) for c in recorded.children.values()]
        wanted |= {(recorded.run.tenant_id, sha): None for sha in refs if sha is not None}
    if not wanted:
        return
    keys = list(wanted)
    rows = await db.all(BLOBS, tenants=[k[0] for k in keys], shas=[k[1] for k in keys])
    for row in rows:
        wanted[row["tenant_id"], bytes(row["sha256"])] = bytes(row["data"]).decode()
    for recorded in runs:
        tenant = recorded.run.tenant_id
        for key, result in recorded.steps.items():
            if (sha := _step_ref(result)) is not None:
                recorded.steps[key] = wanted[tenant, sha] or result
        for step, child in recorded.children.items():
            if (sha := _child_ref(child)) is not None and (value := wanted[tenant, sha]):
                recorded.children[step] = Child(
                    child.id, child.status, json.loads(value), child.error
                )


async def _open_sealed(db: Db, kek: AESGCM, runs: Collection[Recorded]) -> None:
    """What tenants that encrypt sealed, opened (one statement per tenant of the page): step
    results, the run's input and output, wait payloads and children's outputs."""
    ciphers = {t: await sealing.cipher_of(db, kek, t) for t in {r.run.tenant_id for r in runs}}
    for recorded in runs:
        cipher = ciphers[recorded.run.tenant_id]
        if cipher is None:
            continue
        for key, result in recorded.steps.items():
            if result is not None:
                recorded.steps[key] = sealing.open_text(cipher, result)
        run = recorded.run
        recorded.run = replace(
            run,
            input=sealing.open_value(cipher, run.input),
            output=sealing.open_value(cipher, run.output),
        )
        for at, w in recorded.waits.items():
            recorded.waits[at] = replace(w, payload=sealing.open_value(cipher, w.payload))
        for step, c in recorded.children.items():
            recorded.children[step] = replace(c, output=sealing.open_value(cipher, c.output))
