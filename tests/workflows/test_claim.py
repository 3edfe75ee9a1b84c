"""The row is the claim: one predicate on every write that moves a run."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services import runs as runs_service
from outlive.services.runs import claim_run, requeue_run
from tests.support import TenantHandle

LEASE_S = 30.0


class NoInstances:
    """The engine, for tests that drive the steps by hand: nothing is delivered."""

    started: list[RunId]

    def __init__(self) -> None:
        self.started = []

    async def start(self, run_id: RunId) -> None:
        self.started.append(run_id)

    async def resume(self, run_id: RunId) -> None:
        await self.start(run_id)

    async def states(self, run_ids: Any) -> list[Any]:
        raise AssertionError("not used")

    async def redeliver(self, run_ids: Any) -> int:
        return 0


async def new_run(sessions: Sessions, tenant: TenantHandle, agent: str = "demo") -> RunId:
    async with sessions.unit(tenant.id) as uow:
        started = await runs_service.start_run(
            uow, agent=agent, params={"turns": 1}, instances=NoInstances()
        )
    return started.run.id


async def read(sessions: Sessions, tenant: TenantHandle, run_id: RunId) -> runs_service.RunRecord:
    run = await runs_service.read_run(sessions, TenantId(tenant.id), run_id)
    assert run is not None
    return run


async def expire_lease(sessions: Sessions, run_id: RunId) -> None:
    async with sessions.unit() as uow:
        await uow.execute(
            text("UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = :id"),
            id=run_id,
        )


async def events(sessions: Sessions, run_id: RunId) -> list[str]:
    return [e.type for e in await runs_service.list_events(sessions, run_id)]


async def test_a_settled_run_is_never_rewritten(sessions: Sessions, tenant: TenantHandle) -> None:
    run_id = await new_run(sessions, tenant)
    async with sessions.unit() as uow:
        claimed = await claim_run(uow, run_id, lease_s=LEASE_S)
    assert claimed is not None
    assert claimed.attempt == 1
    async with sessions.unit(tenant.id) as uow:
        done = await runs_service.settle_run(
            uow, run_id, RunStatus.SUCCEEDED, output={"a": 1}, attempt=1
        )
    assert done is not None
    before = await read(sessions, tenant, run_id)

    async with sessions.unit(tenant.id) as uow:  # a late finish of the same attempt
        assert (
            await runs_service.settle_run(uow, run_id, RunStatus.FAILED, error="late", attempt=1)
            is None
        )
    async with sessions.unit(tenant.id) as uow:  # a late finish without the fence
        assert await runs_service.settle_run(uow, run_id, RunStatus.CANCELLED) is None
    async with sessions.unit() as uow:  # a late claim (a re-delivered instance)
        assert await claim_run(uow, run_id, lease_s=LEASE_S) is None
    async with sessions.unit(tenant.id) as uow:  # a late cancel
        cancelled = await runs_service.cancel_run(uow, run_id)
    async with sessions.unit(tenant.id) as uow:  # a late event
        assert (
            await runs_service.append_event(uow, run_id, "turn", {}, attempt=1, lease_s=LEASE_S)
            is None
        )
    async with sessions.unit(tenant.id) as uow:  # a late requeue
        assert await requeue_run(uow, claimed, event="retrying", data={}) is None

    after = await read(sessions, tenant, run_id)
    assert after == before == cancelled
    assert after.status == RunStatus.SUCCEEDED
    assert after.output == {"a": 1}
    assert await events(sessions, run_id) == ["claimed", "succeeded"]


async def test_a_superseded_attempt_cannot_settle_or_emit(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await new_run(sessions, tenant)
    async with sessions.unit() as uow:
        first = await claim_run(uow, run_id, lease_s=LEASE_S)
    await expire_lease(sessions, run_id)  # attempt 1's worker died
    async with sessions.unit() as uow:  # the instance was re-delivered: attempt 2 takes over
        second = await claim_run(uow, run_id, lease_s=LEASE_S)
    assert first is not None
    assert second is not None
    assert second.attempt == 2
    assert second.lost_attempts == 1
    async with sessions.unit(tenant.id) as uow:
        assert (
            await runs_service.append_event(uow, run_id, "turn", {}, attempt=1, lease_s=LEASE_S)
            is None
        )
    async with sessions.unit(tenant.id) as uow:
        assert await runs_service.settle_run(uow, run_id, RunStatus.SUCCEEDED, attempt=1) is None
    async with sessions.unit(tenant.id) as uow:
        assert await runs_service.settle_run(uow, run_id, RunStatus.SUCCEEDED, attempt=2)
    assert (await read(sessions, tenant, run_id)).status == RunStatus.SUCCEEDED


async def test_cancelling_a_queued_run_settles_it_at_once(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await new_run(sessions, tenant)
    async with sessions.unit(tenant.id) as uow:
        run = await runs_service.cancel_run(uow, run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.finished_at is not None
    assert run.cancel_requested_at is not None
    async with sessions.unit() as uow:
        assert (
            await claim_run(uow, run_id, lease_s=LEASE_S) is None
        )  # its instance, arriving later, exits
    async with sessions.unit(tenant.id) as uow:
        again = await runs_service.cancel_run(uow, run_id)  # idempotent
    assert again == run
    assert await events(sessions, run_id) == ["cancelled"]


async def test_cancelling_a_running_run_only_requests_it(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = await new_run(sessions, tenant)
    async with sessions.unit() as uow:
        await claim_run(uow, run_id, lease_s=LEASE_S)
    async with sessions.unit(tenant.id) as uow:
        run = await runs_service.cancel_run(uow, run_id)
    assert run.status == RunStatus.RUNNING
    assert run.cancel_requested_at is not None
    assert run.finished_at is None
    async with sessions.unit(tenant.id) as uow:
        again = await runs_service.cancel_run(uow, run_id)
    assert again.cancel_requested_at == run.cancel_requested_at
    assert await events(sessions, run_id) == ["claimed", "cancel_requested"]


async def test_cancel_racing_claim_ends_in_one_consistent_state(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    outcomes = set()
    for _ in range(40):
        run_id = await new_run(sessions, tenant)

        async def claim(run_id: RunId = run_id) -> object:
            async with sessions.unit() as uow:
                return await claim_run(uow, run_id, lease_s=LEASE_S)

        async def cancel(run_id: RunId = run_id) -> object:
            async with sessions.unit(tenant.id) as uow:
                return await runs_service.cancel_run(uow, run_id)

        claimed, _ = await asyncio.gather(claim(), cancel())
        final = await read(sessions, tenant, run_id)
        if claimed is None:  # cancel won: settled before any attempt
            assert final.status == RunStatus.CANCELLED
            assert final.attempt == 0
            outcomes.add("cancel first")
        else:  # claim won: the run holds it and must stop itself at its next turn
            assert final.status == RunStatus.RUNNING
            assert final.attempt == 1
            assert final.cancel_requested_at is not None
            outcomes.add("claim first")
        async with sessions.unit(tenant.id) as uow:  # free the slot for the next round
            await runs_service.settle_run(uow, run_id, RunStatus.CANCELLED)
    assert outcomes  # at least one ordering was seen; each one was consistent


async def test_the_partial_unique_index_holds_under_a_direct_race(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    async def start() -> runs_service.StartedRun:
        async with sessions.unit(tenant.id) as uow:
            return await runs_service.start_run(
                uow, agent="demo", params={}, instances=NoInstances()
            )

    started = await asyncio.gather(*(start() for _ in range(20)))
    assert len({s.run.id for s in started}) == 1
    assert sum(s.created for s in started) == 1
    assert isinstance(started[0].run.id, UUID)
