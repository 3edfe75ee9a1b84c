"""The per-process services and the per-request context handed to every resolver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.errors import Unauthenticated
from outlive.ids import EndpointId, RunId, TenantId
from outlive.realtime.hub import Hub
from outlive.services import admission, outbox, webhooks
from outlive.services import runs as runs_service
from outlive.services.ports import RunInstances
from outlive.services.runs import EventRecord, RunRecord
from outlive.services.tenants import Principal
from outlive.services.webhooks import DeliveryRecord


@dataclass
class Services:
    """Built once per API process by `outlive.app`."""

    sessions: Sessions
    agents: AgentRegistry
    instances: RunInstances
    settings: Settings
    hub: Hub | None = None


@dataclass
class Context:
    services: Services
    principal: Principal | None
    request: Any = None
    response: Any = None
    connection_params: dict[str, Any] | None = None

    def require(self) -> Principal:
        if self.principal is None:
            raise Unauthenticated("a valid bearer token is required")
        return self.principal

    @property
    def tenant_id(self) -> TenantId:
        return self.require().tenant.id

    async def endpoint_deliveries(
        self, endpoint_id: EndpointId, *, first: int
    ) -> list[DeliveryRecord]:
        s = self.services
        async with s.sessions.read() as session:
            found = await webhooks.list_deliveries(
                session, self.tenant_id, endpoint_id, first=first
            )
        await outbox.requeue_stale(
            s.sessions, "webhook", found, grace_s=s.settings.reconcile_grace_s
        )
        return found

    async def waiting_reason(self, run: RunRecord) -> str | None:
        """Why a run waits for a slot under its tenant's cap, and where it is in line."""
        sessions = self.services.sessions
        if not run.is_waiting or sessions.admission is None:
            return None
        return await admission.waiting_reason(
            sessions,
            default_cap=sessions.admission.max_running_runs,
            tenant_id=run.tenant_id,
            run_id=run.id,
            created_at=run.created_at,
        )

    async def run_events(self, run_id: RunId, *, after: int, first: int) -> list[EventRecord]:
        async with self.services.sessions.read() as session:
            return await runs_service.list_events(session, run_id, after=after, first=first)
