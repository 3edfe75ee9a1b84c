"""A run found by the start of its id: the console shows 8-character ids (`701e086a`), and a
person pastes those into the search box or `/runs/<short id>`.

Also the other way along a retry: the runs that retried a run (`retries_of`).

A prefix of 4 to 32 hex digits (dashes ignored) is a range of UUIDs: from the prefix padded with
0s to the prefix padded with fs. The range is read on the primary key's index, the tenant is
checked on the rows found, and at most `limit` come back (newest first): an ambiguous prefix
shows its candidates.
"""

from __future__ import annotations

import re
from uuid import UUID

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.db.tx import Db
from outlive.errors import BadUserInput
from outlive.ids import TenantId
from outlive.services.runs.queries import RUN_COLUMNS
from outlive.services.runs.records import RunRecord, to_record

MIN_PREFIX = 4
MAX_MATCHES = 20
_HEX = re.compile(r"^[0-9a-f]+$")

_BY_PREFIX = prepare(
    text(
        "SELECT * FROM (SELECT * FROM runs WHERE id BETWEEN :low AND :high"
        " AND tenant_id = :tenant_id ORDER BY id LIMIT 1000) found"
        " ORDER BY created_at DESC, id LIMIT :limit"
    ).columns(*RUN_COLUMNS)
)


_RETRIES_OF = prepare(
    text(
        "SELECT id FROM runs WHERE retried_from_id = :run_id AND tenant_id = :tenant_id"
        " ORDER BY created_at DESC LIMIT :limit"
    )
)
MAX_RETRIES_SHOWN = 10


async def retries_of(
    db: Db, tenant_id: TenantId, run_id: UUID, *, limit: int = MAX_RETRIES_SHOWN
) -> list[UUID]:
    """The runs that retried `run_id` (retryRun, replayRuns), newest first: the other way along
    `retried_from_id` (`ix_runs_retried_from`)."""
    rows = await db.all(_RETRIES_OF, run_id=run_id, tenant_id=tenant_id, limit=limit)
    return [r["id"] for r in rows]


def prefix_range(prefix: str) -> tuple[UUID, UUID]:
    """The UUIDs that start with `prefix` (hex, dashes ignored), or BadUserInput."""
    digits = prefix.strip().lower().replace("-", "")
    if not (MIN_PREFIX <= len(digits) <= 32 and _HEX.match(digits)):
        raise BadUserInput(
            f"{prefix!r} is not the start of a run id: give {MIN_PREFIX} to 32 hex digits"
        )
    return UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))


async def find_by_prefix(
    db: Db, tenant_id: TenantId, prefix: str, *, limit: int = MAX_MATCHES
) -> list[RunRecord]:
    low, high = prefix_range(prefix)
    rows = await db.all(
        _BY_PREFIX, low=low, high=high, tenant_id=tenant_id, limit=max(1, min(limit, MAX_MATCHES))
    )
    return [to_record(r) for r in rows]
