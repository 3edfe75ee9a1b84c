"""`run.replay.v1`: one tick of a run replay or a bulk cancel (see `outlive.services.replays`
and `outlive.services.bulk_cancels`: they share the row, so they share the job).

The tick starts its batch of runs, moves the replay's cursor and queues the next tick, all in one
unit of work: a tick that fails leaves the row as it was and is retried; a duplicate delivery of
a tick finds the row's tick counter moved on and does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from outlive.db.models import ReplayKind
from outlive.jobs.deps import JobDeps
from outlive.jobs.envelopes import ReplayRunsV1
from outlive.services import bulk_cancels, replays, sealing
from outlive.services.ratelimits import start_run_bucket


def validator(deps: JobDeps) -> replays.Validate:
    def validate(agent: str, stored: Mapping[str, Any]) -> Mapping[str, Any]:
        return deps.agents.require(agent).validate(stored, settings=deps.settings)

    return validate


def admitter(deps: JobDeps) -> replays.Admit | None:
    """Each run a replay starts takes a token from its tenant's startRun bucket."""
    limiter = deps.limiter
    if limiter is None:
        return None

    async def admit(tenant_id: UUID) -> bool:
        return await limiter.admits(start_run_bucket(tenant_id, deps.settings.rate_start_run))

    return admit


async def handle(deps: JobDeps, payload: ReplayRunsV1) -> None:
    async with deps.sessions.unit() as uow:
        if await replays.kind_of(uow, payload.replay_id) is ReplayKind.CANCEL:
            await bulk_cancels.advance_cancel(uow, payload.replay_id, payload.tick)
            return
        await replays.advance_replay(
            uow,
            payload.replay_id,
            payload.tick,
            validate=validator(deps),
            instances=deps.instances,
            admit=admitter(deps),
            kek=sealing.kek_of(deps.settings),
        )


async def give_up(deps: JobDeps, payload: ReplayRunsV1, error: str) -> None:
    async with deps.sessions.unit() as uow:
        await replays.fail_replay(uow, payload.replay_id, f"gave up: {error}")
