"""The per-process services and the per-request context handed to every resolver: data and
loaders only. What the schema's types ask of it (`schema.context.SchemaContext`) is a page check
and a loader, or a service function called by name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.models import DeliveryStatus, RunStatus
from outlive.db.ports import REAL_TIME, Admission, JobProducer, RunInstances, TimeSource
from outlive.db.tx import Sessions
from outlive.errors import BadUserInput, Unauthenticated
from outlive.ids import DeliveryId, EndpointId, RunId, TenantId
from outlive.realtime.hub import Hub
from outlive.realtime.outputs import OutputTails
from outlive.realtime.registry import OpenSocket, SocketRegistry
from outlive.realtime.revocations import Announcer
from outlive.resolvers.loaders import Loaders
from outlive.services import admission, retention, sealing, timelines, webhooks
from outlive.services.erasure import Forget, forget_nothing
from outlive.services.ratelimits import RateLimiter
from outlive.services.runs import (
    MAX_PAGE,
    EventRecord,
    RunPage,
    RunRecord,
    StepRecord,
    check_steps_page,
    children,
    lookup,
    read_runs,
    tree,
)
from outlive.services.tenants import Principal
from outlive.services.tokens import PrincipalCache
from outlive.services.usage_tokens import RunUsage
from outlive.services.webhooks import AttemptRecord, DeliveryRecord

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NOWHERE = TenantId(UUID(int=0))  # no tenant's id: what a run read token reads outside its run


@dataclass
class Services:
    """Built once per API process by `outlive.app`."""

    sessions: Sessions
    agents: AgentRegistry
    instances: RunInstances
    admission: Admission  # the runtime's (`Sessions` is given the same one)
    jobs: JobProducer
    settings: Settings
    auth: PrincipalCache
    sockets: SocketRegistry
    limiter: RateLimiter
    announcer: Announcer  # token changes (removed members, new roles) to every API process
    hub: Hub | None = None
    outputs: OutputTails | None = None  # runs' output streams (`runOutput`)
    forget: Forget = forget_nothing  # what Redis keeps of erased runs (`eraseSubject`)
    time: TimeSource = REAL_TIME  # what schedules read as now (a test harness's fake clock)

    # with cells: the cell of an invitation code (`outlive.cells.Cells.for_code`)
    code_cell: Callable[[str], Awaitable[Services]] | None = None

    async def for_code(self, code: str) -> Services:
        """The services of the cell that holds invitation code `code` (this one without cells):
        `acceptInvitation` carries no token to route by (docs/cells.md)."""
        return self if self.code_cell is None else await self.code_cell(code)

    async def authenticate(self, token: str) -> Principal | None:
        """The principal of a bearer token, through this process's cache (which obeys
        revocation and expiry)."""
        return await self.auth.authenticate(self.sessions, token)


@dataclass(slots=True)  # one per request and per open socket: no __dict__ each
class Context:
    services: Services
    principal: Principal | None
    request: Any = None
    response: Any = None
    connection_params: dict[str, Any] | None = None
    token: str | None = None  # the bearer token of a socket, re-checked on every subscribe
    socket: OpenSocket | None = None  # the socket's registration (per-tenant cap, revocation)
    _loaders: Loaders | None = field(default=None, repr=False)

    def require(self) -> Principal:
        if self.principal is None:
            raise Unauthenticated("a valid bearer token is required")
        return self.principal

    @property
    def tenant_id(self) -> TenantId:
        """The tenant every read and write is scoped to. A run read token's is `NOWHERE`: any
        read but its run's answers as for another tenant (null or empty)."""
        principal = self.require()
        return NOWHERE if principal.is_run_reader else principal.tenant.id

    def run_tenant(self, run_id: RunId) -> TenantId:
        """The tenant to read run `run_id` under: a run read token's for its one run."""
        principal = self.require()
        if principal.run_id is None or principal.run_id == run_id:
            return principal.tenant.id
        return NOWHERE

    def require_member(self) -> Principal:
        """The principal of a tenant's API token (a run read token is refused)."""
        principal = self.require()
        if principal.is_run_reader:
            raise Unauthenticated("a run read token reads its run and nothing else")
        return principal

    @property
    def loaders(self) -> Loaders:
        """This request's DataLoaders (made on first use)."""
        if self._loaders is None:
            self._loaders = Loaders(
                self.services.sessions,
                lambda: self.tenant_id,
                repair_grace_s=self.services.settings.reconcile_grace_s,
                jobs=self.services.jobs,
                admission=self.services.admission,
                kek=sealing.kek_of(self.services.settings),
                sealing_tenant=lambda: self.require().tenant.id,  # a run reader's too
            )
        return self._loaders

    async def opened(self, runs: list[RunRecord]) -> list[RunRecord]:
        """The runs as the client gave and gets them: sealed inputs and outputs opened."""
        return await self.loaders.opened_runs(runs)

    async def write_cipher(self) -> AESGCM | None:
        """The tenant's data cipher for what this request writes (None: it does not encrypt):
        looked up afresh, so a tenant that turned encryption on has its next write sealed."""
        kek = sealing.kek_of(self.services.settings)
        return await sealing.cipher_of(self.services.sessions, kek, self.tenant_id)

    async def endpoint_deliveries(
        self,
        endpoint_id: EndpointId,
        *,
        first: int,
        status: DeliveryStatus | None = None,
        before: datetime | None = None,
    ) -> list[DeliveryRecord]:
        webhooks.check_deliveries_page(first)  # this field's error, not the whole batch's
        self.require()
        shape = (first, status, before)
        return await self.loaders.deliveries.load((endpoint_id, shape))  # repaired on read

    async def endpoint_delivery_count(
        self, endpoint_id: EndpointId, status: DeliveryStatus | None
    ) -> int:
        """The endpoint's deliveries counted up to 1,001 (one statement a page; tenant-scoped)."""
        self.require()
        return await self.loaders.delivery_counts.load((endpoint_id, status))

    async def delivery_attempts(self, delivery_id: str) -> list[AttemptRecord]:
        """A delivery's logged attempts, newest first (one statement per page; tenant-scoped)."""
        self.require()
        return await self.loaders.attempts.load(DeliveryId(UUID(delivery_id)))

    async def waiting_reason(self, run: RunRecord) -> str | None:
        """Why a run waits for a slot under its tenant's cap, and where it is in line; or that
        its agent's code failed to load here (its runs wait for it)."""
        broken = self.services.agents.unavailable.get(run.agent)
        if broken is not None and run.status == RunStatus.QUEUED:
            return f"its agent's code failed to load ({broken}); it waits for a fix"
        limits = self.services.admission.limits
        return await admission.waiting_reason_of(self.services.sessions, run, limits=limits)

    async def run_events(self, run_id: RunId, *, after: int, first: int) -> list[EventRecord]:
        timelines.check_events_page(first)
        self.require()
        return await self.loaders.events.load((run_id, after, first))

    async def run_retries(self, run_id: RunId) -> list[RunId]:
        """The runs that retried this one, newest first (the run was read under this tenant)."""
        found = await lookup.retries_of(self.services.sessions, self.tenant_id, run_id)
        return [RunId(r) for r in found]

    async def run_children(
        self, run: RunRecord, *, first: int, after: str | None, statuses: Any
    ) -> RunPage:
        """A page of the run's children, oldest first (the run was read under this tenant)."""
        if not 0 <= first <= MAX_PAGE:
            raise BadUserInput(f"first must be between 0 and {MAX_PAGE}")
        page = await children.read_children_page(
            self.services.sessions,
            self.tenant_id,
            run.id,
            first=first,
            after=after,
            statuses=[s.value for s in statuses] if statuses else None,
        )
        page.runs[:] = await self.opened(page.runs)
        return page

    async def schedule_runs(self, schedule_id: UUID, *, first: int, after: str | None) -> RunPage:
        """A page of the schedule's runs, newest first (`runs(scheduleId:)`)."""
        page = await read_runs(
            self.services.sessions,
            self.tenant_id,
            first=first,
            after=after,
            schedule_id=schedule_id,
        )
        page.runs[:] = await self.opened(page.runs)
        return page

    async def run_child_counts(self, run_id: RunId) -> list[tree.StatusCount]:
        """The run's children per status (one statement per page of runs; tenant-scoped)."""
        self.require()
        return await self.loaders.child_counts.load(run_id)

    async def run_ancestors(self, run_id: RunId) -> list[RunRecord]:
        """The runs above it, root first (one statement per page of runs; tenant-scoped)."""
        self.require()
        return await self.opened(await self.loaders.ancestors.load(run_id))

    async def run_usage(self, run_id: RunId) -> RunUsage:
        """The run's summed model usage (two statements per page of runs)."""
        self.require()
        return await self.loaders.usage.load(run_id)

    async def run_tree_usage(self, run_id: RunId) -> RunUsage:
        """The run's and its descendants' summed model usage (two statements per page)."""
        self.require()
        return await self.loaders.tree_usage.load(run_id)

    async def run_steps(self, run_id: RunId, *, after: int, first: int) -> list[StepRecord]:
        check_steps_page(first)  # this field's error, not the whole batch's
        self.require()
        return await self.loaders.steps.load((run_id, after, first))

    async def tenant_retention_days(self) -> int:
        """How many days the tenant keeps settled runs (`setRetention`, else the default)."""
        s = self.services
        return await retention.retention_of(s.sessions, self.tenant_id, s.settings.retention_days)

    async def step_result(self, run_id: RunId, seq: int) -> Any:
        """What the step returned, as recorded (one statement per page of steps asked)."""
        self.require()
        return await self.loaders.step_results.load((run_id, seq))
