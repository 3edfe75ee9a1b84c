"""Large payloads stored once (contract §7 "Retention and erasure", issue 46).

A step's result, a run's input or output and a signal's payload whose JSON is larger than
`OUTLIVE_BLOB_THRESHOLD_BYTES` (256 KiB) is written to `blobs`, keyed by the tenant and the
sha256 of its JSON text, once however many runs carry it; the row that would have held it holds
a reference instead (`{"$blob": "<sha256 hex>", "size": <bytes>}`) and `blob_refs` records that
the run holds it. An agent never sees a reference: the journal and the run's input are resolved
before they reach it (`resolve`). A GraphQL answer carries the reference (so it stays within the
answer cap) and `payload(runId, ref, offset, length)` reads the value in ranges.

A blob is deleted once no run holds it: retention sweeps blobs nobody has held for `GRACE`
(a writer that found a blob already there touches it, so a blob being shared again is never
swept under it), and `eraseSubject` deletes the blobs of the runs it erased at once, unless
another run of the tenant holds the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import ARRAY, LargeBinary, Uuid, bindparam, text

from outlive.db.raw import prepare
from outlive.db.tx import Db, Sessions
from outlive.errors import BadUserInput, NotFound

KEY = "$blob"
THRESHOLD = 256 * 1024
MAX_RANGE = 1024 * 1024  # the most `payload` returns at once
SWEEP_BATCH = 200
GRACE = "interval '10 minutes'"

PART_BYTES = 8064  # a `blob_parts` row fills one 8 KiB page (db/models/governance.py)

# One statement: the blob (or, when the tenant has those bytes already, a touch of it: `fresh`
# false, no part written), its parts, and the run's hold on it. A second writer of the same
# bytes waits on the first one's row and then only touches it.
_PUT = prepare(
    text(
        f"""WITH stored AS (
             INSERT INTO blobs (tenant_id, sha256, size) VALUES (:tenant_id, :sha, :size)
             ON CONFLICT (tenant_id, sha256) DO UPDATE SET created_at = now()
             RETURNING sha256, (xmax = 0) AS fresh),
           parts AS (
             INSERT INTO blob_parts (tenant_id, sha256, part, data)
             SELECT :tenant_id, :sha, p, substring(CAST(:data AS bytea) FROM p * {PART_BYTES} + 1
                                  FOR {PART_BYTES})
               FROM stored, generate_series(0, (CAST(:size AS int) - 1) / {PART_BYTES}) p
              WHERE stored.fresh)
           INSERT INTO blob_refs (run_id, sha256, tenant_id)
           SELECT :run_id, sha256, :tenant_id FROM stored
           ON CONFLICT DO NOTHING"""  # noqa: S608 (a constant)
    )
)
_GET = prepare(
    text(
        "SELECT string_agg(data, '' ORDER BY part) AS data FROM blob_parts"
        " WHERE tenant_id = :tenant_id AND sha256 = :sha"
    )
)
_GET_HELD = prepare(
    text(
        "SELECT string_agg(p.data, '' ORDER BY p.part) AS data FROM blob_refs r JOIN blob_parts p"
        " ON p.tenant_id = r.tenant_id AND p.sha256 = r.sha256"
        " WHERE r.run_id = :run_id AND r.sha256 = :sha"
    )
)
# The parts that cover a range, of a blob the run holds, within the tenant.
_RANGE = prepare(
    text(
        """SELECT b.size, string_agg(p.data, '' ORDER BY p.part) AS data
             FROM blobs b JOIN blob_refs r ON r.tenant_id = b.tenant_id AND r.sha256 = b.sha256
             JOIN runs x ON x.id = r.run_id
             LEFT JOIN blob_parts p ON p.tenant_id = b.tenant_id AND p.sha256 = b.sha256
                   AND p.part BETWEEN :first AND :last
            WHERE b.tenant_id = :tenant_id AND b.sha256 = :sha AND r.run_id = :run_id
              AND x.tenant_id = :tenant_id
            GROUP BY b.size"""
    )
)
_COPY_REFS = prepare(
    text(
        "INSERT INTO blob_refs (run_id, sha256, tenant_id)"
        " SELECT :to_run, sha256, tenant_id FROM blob_refs WHERE run_id = :from_run"
        " ON CONFLICT DO NOTHING"
    )
)
_HELD = prepare(
    text("SELECT DISTINCT sha256 FROM blob_refs WHERE run_id = ANY(:run_ids)").bindparams(
        bindparam("run_ids", type_=ARRAY(Uuid()))
    )
)
_DROP_UNHELD = prepare(
    text(
        """DELETE FROM blobs b WHERE b.tenant_id = :tenant_id AND b.sha256 = ANY(:shas)
             AND NOT EXISTS (SELECT 1 FROM blob_refs r
                              WHERE r.tenant_id = b.tenant_id AND r.sha256 = b.sha256)"""
    ).bindparams(bindparam("shas", type_=ARRAY(LargeBinary())))
)
_SWEEP = prepare(
    text(
        f"""DELETE FROM blobs WHERE (tenant_id, sha256) IN (
             SELECT b.tenant_id, b.sha256 FROM blobs b
              WHERE b.created_at < now() - {GRACE}
                AND NOT EXISTS (SELECT 1 FROM blob_refs r
                                 WHERE r.tenant_id = b.tenant_id AND r.sha256 = b.sha256)
              LIMIT :batch FOR UPDATE SKIP LOCKED)"""  # noqa: S608 (a constant)
    )
)


def ref_of(value: Any) -> str | None:
    """The sha256 (hex) a stored value refers to, or None when it is a value."""
    if isinstance(value, dict) and len(value) == 2:
        ref = value.get(KEY)
        if isinstance(ref, str):
            return ref
    return None


def encoded(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


async def store(
    db: Db, tenant_id: UUID, run_id: UUID, value: Any, *, threshold: int = THRESHOLD
) -> Any:
    """What to write in place of `value`: itself when small, else a reference to its blob
    (written, or touched when the tenant already has those bytes)."""
    if value is None:
        return None
    data = encoded(value)
    if len(data) <= threshold:
        return value
    sha = hashlib.sha256(data).digest()
    await db.execute(_PUT, tenant_id=tenant_id, run_id=run_id, sha=sha, size=len(data), data=data)
    return {KEY: sha.hex(), "size": len(data)}


async def resolve(db: Db, tenant_id: UUID, value: Any) -> Any:
    """The value a stored one stands for (a reference is read back; anything else is itself)."""
    ref = ref_of(value)
    if ref is None:
        return value
    row = await db.one(_GET, tenant_id=tenant_id, sha=bytes.fromhex(ref))
    if row is None or row["data"] is None:
        raise NotFound(f"payload {ref} not found")
    return json.loads(bytes(row["data"]))


async def resolve_held(db: Db, run_id: UUID, value: Any) -> Any:
    """`resolve`, for a value of the run `run_id` (a child's output its parent reads)."""
    ref = ref_of(value)
    if ref is None:
        return value
    row = await db.one(_GET_HELD, run_id=run_id, sha=bytes.fromhex(ref))
    if row is None or row["data"] is None:
        raise NotFound(f"payload {ref} of run {run_id} not found")
    return json.loads(bytes(row["data"]))


async def read_range(
    db: Db, tenant_id: UUID, run_id: UUID, ref: str, offset: int, length: int
) -> tuple[int, bytes]:
    """(the blob's size, bytes [offset, offset + length)) of a blob the run holds."""
    if offset < 0 or not 0 < length <= MAX_RANGE:
        raise BadUserInput(f"offset from 0, length 1 to {MAX_RANGE}")
    try:
        sha = bytes.fromhex(ref)
    except ValueError:
        raise BadUserInput("ref is a sha256 in hex") from None
    first, last = offset // PART_BYTES, (offset + length - 1) // PART_BYTES
    row = await db.one(_RANGE, tenant_id=tenant_id, run_id=run_id, sha=sha, first=first, last=last)
    if row is None:
        raise NotFound(f"payload {ref} not found")
    covered = bytes(row["data"] or b"")
    start = offset - first * PART_BYTES
    return int(row["size"]), covered[start : start + length]


async def copy_refs(db: Db, *, from_run: UUID, to_run: UUID) -> None:
    """`to_run` holds the blobs `from_run` holds (its journal was copied: `reuseSteps`)."""
    await db.execute(_COPY_REFS, from_run=from_run, to_run=to_run)


async def held_by(db: Db, run_ids: Sequence[UUID]) -> list[bytes]:
    return [bytes(r["sha256"]) for r in await db.all(_HELD, run_ids=list(run_ids))]


async def drop_unheld(db: Db, tenant_id: UUID, shas: Sequence[bytes]) -> int:
    """Delete those of the tenant's blobs no run holds any more (erasure: at once)."""
    if not shas:
        return 0
    return await db.execute(_DROP_UNHELD, tenant_id=tenant_id, shas=list(shas))


async def sweep(sessions: Sessions, *, batch: int = SWEEP_BATCH) -> int:
    """Delete blobs no run has held for `GRACE`, in batches (retention, after the runs)."""
    total = 0
    while True:
        deleted = await sessions.execute(_SWEEP, batch=batch)
        total += deleted
        if deleted < batch:
            return total


def is_ref_text(recorded: str) -> bool:
    """A journal row's JSON text is a reference (cheap: a reference is short)."""
    return len(recorded) < 200 and KEY in recorded and ref_of(json.loads(recorded)) is not None


async def store_text(db: Db, tenant_id: UUID, run_id: UUID, value_json: str) -> str:
    """`value_json` (JSON text) stored as a blob the run holds; the reference, as JSON text."""
    data = value_json.encode()
    sha = hashlib.sha256(data).digest()
    await db.execute(_PUT, tenant_id=tenant_id, run_id=run_id, sha=sha, size=len(data), data=data)
    return json.dumps({KEY: sha.hex(), "size": len(data)})


async def read_text(db: Db, tenant_id: UUID, ref_json: str) -> str:
    """The JSON text a reference (as JSON text) stands for."""
    ref = ref_of(json.loads(ref_json))
    row = None if ref is None else await db.one(_GET, tenant_id=tenant_id, sha=bytes.fromhex(ref))
    if row is None or row["data"] is None:
        raise NotFound(f"payload {ref} not found")
    return bytes(row["data"]).decode()
