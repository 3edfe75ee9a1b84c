"""A run found by the start of its id: the console shows 8-character ids (`701e086a`), and a
person pastes those into the search box or `/runs/<short id>`.

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
