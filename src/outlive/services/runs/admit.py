"""Admission after a commit: the one place a unit asks for its tenant's waiting runs to be
admitted (and enqueued) once what it wrote is committed."""

from __future__ import annotations

from outlive.db.tx import Unit
from outlive.ids import TenantId


def dispatch_after_commit(uow: Unit, tenant_id: TenantId) -> None:
    """After the commit, admit the tenant's waiting runs up to its cap (and enqueue them)."""
    uow.admit_after_commit(tenant_id, "runs", queue_down_raises=True)
