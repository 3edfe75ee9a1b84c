"""`*/10 * * * *`: PENDING, SENT or FAILED invitations past their `expires_at` become EXPIRED."""

from __future__ import annotations

from outlive.cron.deps import CronDeps
from outlive.services import invitations


async def expire_invitations(deps: CronDeps) -> int:
    total = 0
    while True:
        async with deps.sessions.unit() as uow:
            expired = await invitations.expire_batch(uow, batch=500)
        total += expired
        if expired < 500:
            return total
