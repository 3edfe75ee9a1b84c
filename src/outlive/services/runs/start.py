"""Starting a run: insert it, or hand back the tenant's active run of that agent."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from outlive.db.models import RunStatus
from outlive.db.tx import Unit
from outlive.errors import QueueUnavailable
from outlive.ids import RunId, TenantId
from outlive.services import relay
from outlive.services.ports import RunInstances
from outlive.services.runs import queries
from outlive.services.runs.moves import dispatch_after_commit
from outlive.services.runs.records import RunRecord, StartedRun, json_text, to_record
from outlive.telemetry import metrics

log = logging.getLogger(__name__)


async def start_run(
    uow: Unit,
    *,
    agent: str,
    params: Mapping[str, Any],
    instances: RunInstances,
    retried_from: RunId | None = None,
) -> StartedRun:
    """Insert the run, or hand back the active one; the instance starts only after commit.

    Handing back a QUEUED run (or one whose lease has expired) also enqueues its instance again,
    which is a no-op while one is queued, scheduled or executing (the job key is the run id): a
    client that retries after an API died between its commit and its enqueue gets a run that
    will run, not one that can only fail. `retried_from`: the run this one retries (`retryRun`,
    replays)."""
    tenant_id = TenantId(uow.require_tenant())
    run, created = await _insert_or_get_active(uow, tenant_id, agent, params, retried_from)
    if created:
        metrics.RUNS_STARTED.labels(run.agent).inc()
        uow.nudge("run.created", run.id)
    started = StartedRun(run=run, created=created)
    if run.is_waiting:
        dispatch_after_commit(uow, tenant_id)
    elif created:

        async def start_instance() -> None:
            started.run = await _start_instance(uow, instances, run)

        uow.after_commit(start_instance)
    elif _may_have_lost_its_instance(run):

        async def repair_instance() -> None:
            try:
                await instances.start(run.id)
            except QueueUnavailable:
                log.warning("run %s: cannot re-enqueue it, the queue is unreachable", run.id)

        uow.after_commit(repair_instance)
    return started


def _may_have_lost_its_instance(run: RunRecord) -> bool:
    if run.status == RunStatus.QUEUED:
        return True
    if run.status == RunStatus.WAITING:  # no instance, by design: its wake hands it over
        return False
    return run.lease_expires_at is None or run.lease_expires_at < datetime.now(UTC)


async def _insert_or_get_active(
    uow: Unit,
    tenant_id: TenantId,
    agent: str,
    params: Mapping[str, Any],
    retried_from: RunId | None = None,
) -> tuple[RunRecord, bool]:
    admission = uow.sessions.admission
    values = {
        "tenant_id": tenant_id,
        "agent": agent,
        "input": json_text(dict(params)),
        "retried_from_id": retried_from,
        "default_cap": 0 if admission is None else admission.max_running_runs,
        "agents": 0 if admission is None else admission.agents,
    }
    # The conflicting run can settle between the two statements; then the insert wins next time.
    for _ in range(10):
        row = await uow.one(queries.INSERT_RUN, **values)
        if row is not None:
            return to_record(row), True
        row = await uow.one(queries.ACTIVE_RUN, tenant_id=tenant_id, agent=agent)
        if row is not None:
            return to_record(row), False
    raise RuntimeError(f"could not insert or find the active {agent!r} run")


async def _start_instance(uow: Unit, instances: RunInstances, run: RunRecord) -> RunRecord:
    """The fast path; when the queue cannot take the run, it stays QUEUED and goes to the relay
    (`services.relay`), which hands it once the queue is back. The run as it is now."""
    try:
        await instances.start(run.id)
    except QueueUnavailable as exc:
        log.warning("run %s goes to the relay: %s", run.id, exc.message)
        rows = await relay.handoff_failed_runs(uow.sessions, [run.id])
        return to_record(rows[0]) if rows else run
    return run
