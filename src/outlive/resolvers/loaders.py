"""Per-request DataLoaders: a page of runs asking for their events, steps, usage, children's
counts or ancestors, or the endpoints asking for their deliveries, costs one statement per page
shape instead of one per row (no N+1).

Keys carry the page arguments (`after`, `first`), so aliases with different pages batch into one
statement per distinct shape. Deliveries are repaired as they are read
(`outbox.deliveries_with_repair`: a stale pending one is requeued). Loaders do not cache
(`cache=False`): a socket's context lives as long as the socket, and a later read must see later
rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from strawberry.dataloader import DataLoader

from outlive.db.models import DeliveryStatus
from outlive.db.ports import Admission, JobProducer
from outlive.db.tx import Sessions
from outlive.ids import DeliveryId, EndpointId, RunId, TenantId
from outlive.services import outbox, sealing, timelines, usage_tokens, webhooks
from outlive.services.runs import (
    EventRecord,
    RunRecord,
    StepRecord,
    list_steps_of_runs,
    step_results,
    tree,
)
from outlive.services.webhooks import AttemptRecord, DeliveryRecord

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

EventsKey = tuple[RunId, int, int]  # (run, after, first)
# (endpoint, (first, status, before))
DeliveriesKey = tuple[EndpointId, tuple[int, DeliveryStatus | None, datetime | None]]
StepKey = tuple[RunId, int]  # (run, step seq)

K = TypeVar("K")
Shape = TypeVar("Shape")
Id = TypeVar("Id")
V = TypeVar("V")


async def _by_shape(
    keys: Sequence[tuple[Id, Shape]],
    load: Callable[[list[Id], Shape], Awaitable[dict[Id, V]]],
) -> list[V]:
    """One `load(ids, shape)` per distinct shape; the values in the order of `keys`."""
    groups: dict[Shape, list[Id]] = defaultdict(list)
    for item, shape in keys:
        groups[shape].append(item)
    found: dict[tuple[Id, Shape], V] = {}
    for shape, ids in groups.items():
        for item, value in (await load(ids, shape)).items():
            found[(item, shape)] = value
    return [found[key] for key in keys]


class Loaders:
    def __init__(
        self,
        sessions: Sessions,
        tenant_id: Callable[[], TenantId],
        *,
        repair_grace_s: float,
        jobs: JobProducer,
        admission: Admission,
        kek: AESGCM | None = None,
        sealing_tenant: Callable[[], TenantId] | None = None,
    ) -> None:
        self._sessions = sessions
        self.ciphers = sealing.Ciphers(sessions, kek)  # sealed values of tenants that encrypt
        self._jobs = jobs
        self._admission = admission
        self._repair_grace_s = repair_grace_s
        self._tenant_id = tenant_id
        self._sealing_tenant = sealing_tenant or tenant_id  # whose key opens what it reads
        self.events: DataLoader[EventsKey, list[EventRecord]] = DataLoader(
            self._load_events, cache=False
        )
        self.steps: DataLoader[EventsKey, list[StepRecord]] = DataLoader(
            self._load_steps, cache=False
        )
        self.step_results: DataLoader[StepKey, Any] = DataLoader(
            self._load_step_results, cache=False
        )
        self.deliveries: DataLoader[DeliveriesKey, list[DeliveryRecord]] = DataLoader(
            self._load_deliveries, cache=False
        )
        self.delivery_counts: DataLoader[tuple[EndpointId, DeliveryStatus | None], int] = (
            DataLoader(self._load_delivery_counts, cache=False)
        )
        self.attempts: DataLoader[DeliveryId, list[AttemptRecord]] = DataLoader(
            self._load_attempts, cache=False
        )
        self.usage: DataLoader[RunId, usage_tokens.RunUsage] = DataLoader(
            self._load_usage, cache=False
        )
        self.tree_usage: DataLoader[RunId, usage_tokens.RunUsage] = DataLoader(
            self._load_tree_usage, cache=False
        )
        self.child_counts: DataLoader[RunId, list[tree.StatusCount]] = DataLoader(
            self._load_child_counts, cache=False
        )
        self.ancestors: DataLoader[RunId, list[RunRecord]] = DataLoader(
            self._load_ancestors, cache=False
        )

    async def _load_child_counts(self, keys: Sequence[RunId]) -> list[list[tree.StatusCount]]:
        found = await tree.count_children_of_runs(self._sessions, self._tenant_id(), keys)
        return [found[key] for key in keys]

    async def _load_ancestors(self, keys: Sequence[RunId]) -> list[list[RunRecord]]:
        found = await tree.list_ancestors_of_runs(self._sessions, self._tenant_id(), keys)
        return [found[key] for key in keys]

    async def _load_usage(self, keys: Sequence[RunId]) -> list[usage_tokens.RunUsage]:
        found = await usage_tokens.usage_of_runs(self._sessions, keys)
        return [found[key] for key in keys]

    async def _load_tree_usage(self, keys: Sequence[RunId]) -> list[usage_tokens.RunUsage]:
        found = await usage_tokens.usage_of_runs(self._sessions, keys, trees=True)
        return [found[key] for key in keys]

    async def _load_events(self, keys: Sequence[EventsKey]) -> list[list[EventRecord]]:
        async def load(ids: list[RunId], page: tuple[int, int]) -> dict[RunId, list[EventRecord]]:
            after, first = page
            return await timelines.list_events_of_runs(
                self._sessions, ids, after=after, first=first
            )

        pages = await _by_shape([(run, (after, first)) for run, after, first in keys], load)
        return [[await self._opened_event(e) for e in page] for page in pages]

    async def _opened_event(self, event: EventRecord) -> EventRecord:
        """A `signal` event as it was sent: its payload opened when its tenant encrypts."""
        payload = event.data.get("payload") if event.type == "signal" else None
        if not sealing.is_sealed_value(payload):
            return event
        opened = await self.ciphers.open(self._sealing_tenant(), payload)
        return replace(event, data={**event.data, "payload": opened})

    async def opened_runs(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        """The runs with their input and output as they were given and returned (sealed ones
        opened, by each run's tenant's data key; no query for a tenant that does not encrypt)."""
        return [await self.opened_run(r) for r in runs]

    async def opened_run(self, run: RunRecord) -> RunRecord:
        if not (sealing.is_sealed_value(run.input) or sealing.is_sealed_value(run.output)):
            return run
        return replace(
            run,
            input=await self.ciphers.open(run.tenant_id, run.input),
            output=await self.ciphers.open(run.tenant_id, run.output),
        )

    async def _load_steps(self, keys: Sequence[EventsKey]) -> list[list[StepRecord]]:
        async def load(ids: list[RunId], page: tuple[int, int]) -> dict[RunId, list[StepRecord]]:
            after, first = page
            return await list_steps_of_runs(self._sessions, ids, after=after, first=first)

        return await _by_shape([(run, (after, first)) for run, after, first in keys], load)

    async def _load_step_results(self, keys: Sequence[StepKey]) -> list[Any]:
        cipher = await self.ciphers.of(self._sealing_tenant())
        found = await step_results(self._sessions, keys, cipher=cipher)
        return [found.get(key) for key in keys]

    async def _load_delivery_counts(
        self, keys: Sequence[tuple[EndpointId, DeliveryStatus | None]]
    ) -> list[int]:
        tenant_id = self._tenant_id()

        async def load(
            ids: list[EndpointId], status: DeliveryStatus | None
        ) -> dict[EndpointId, int]:
            return await webhooks.count_deliveries_of_endpoints(
                self._sessions, tenant_id, ids, status=status
            )

        return await _by_shape(keys, load)

    async def _load_attempts(self, keys: Sequence[DeliveryId]) -> list[list[AttemptRecord]]:
        found = await webhooks.list_attempts_of_deliveries(self._sessions, self._tenant_id(), keys)
        return [found[key] for key in keys]

    async def _load_deliveries(self, keys: Sequence[DeliveriesKey]) -> list[list[DeliveryRecord]]:
        tenant_id = self._tenant_id()

        async def load(
            ids: list[EndpointId], shape: tuple[int, DeliveryStatus | None, datetime | None]
        ) -> dict[EndpointId, list[DeliveryRecord]]:
            first, status, before = shape
            return await webhooks.list_deliveries_of_endpoints(
                self._sessions, tenant_id, ids, first=first, status=status, before=before
            )

        pages = await _by_shape(keys, load)
        await outbox.deliveries_with_repair(
            [d for page in pages for d in page],
            jobs=self._jobs,
            admission=self._admission,
            grace_s=self._repair_grace_s,
        )
        return pages
