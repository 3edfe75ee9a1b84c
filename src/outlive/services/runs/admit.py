"""Admission after a commit: the one place a unit asks for its tenant's waiting runs to be
admitted (and enqueued) once what it wrote is committed."""

from __future__ import annotations

from outlive.db.tx import Unit
from outlive.ids import TenantId


def dispatch_after_commit(uow: Unit, tenant_id: TenantId) -> None:
    """After the commit, admit the tenant's waiting runs up to its cap (and enqueue them)."""
    admission = uow.sessions.admission
    if admission is None:
        raise RuntimeError("no admission is wired: a waiting run is never started inline")

    async def dispatch() -> None:
        await admission.dispatch_runs(tenant_id)

    uow.after_commit(dispatch)
