"""`ctx.schedules`: an agent sets its own reminders (contract §4.2, issue 44).

`await ctx.schedules.create(cron="0 8 * * 1-5", timezone="Europe/Paris", input={...})` makes a
schedule of the run's tenant (of the run's own agent unless `agent=` names another) and returns
its id. It is a durable step (`schedules.create:<name>`): a later attempt gets the id back
without making another. Its row also carries its origin, "<run id>/<name>#<occurrence>", unique
per tenant, so a worker killed after the schedule's commit and before the step's record finds
the schedule it made rather than making a second one. The spec is checked as `createSchedule`
checks it (cron, zone, limits, the agent's input): a bad one fails the run, as any error does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from outlive.db.models import RunConflict
from outlive.services import schedules
from outlive.services.sealing import Sealer
from outlive.workflows.deps import WorkflowDeps

Step = Callable[[str, Callable[[], Awaitable[str]]], Awaitable[str]]


class RunSchedules:
    """What `ctx.schedules` is: `create` (one schedule per call, whatever the crashes)."""

    def __init__(
        self,
        deps: WorkflowDeps,
        *,
        run_id: Any,
        tenant_id: Any,
        agent: str,
        step: Step,
        sealer: Sealer | None = None,
    ) -> None:
        self._deps = deps
        self._sealer = sealer or Sealer()  # the run's: a tenant that encrypts seals the input
        self._run_id = run_id
        self._tenant_id = tenant_id
        self._agent = agent
        self._step = step
        self._calls: Counter[str] = Counter()

    async def create(
        self,
        *,
        cron: str,
        input: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        agent: str | None = None,
        key: str | None = None,
        on_conflict: RunConflict | str = RunConflict.REJECT,
        tags: Sequence[str] = (),
        jitter_seconds: int = 0,
        catchup_window_seconds: int = 300,
        name: str = "schedule",
    ) -> str:
        """Make a schedule (see the module's docstring); its id."""
        settings = self._deps.settings
        chosen = self._deps.agents.require(agent or self._agent)
        limits = schedules.ScheduleLimits(
            settings.tenant_max_schedules, settings.schedule_min_interval_s
        )
        spec = schedules.check_spec(
            schedules.ScheduleSpec(
                agent=chosen.name,
                cron=cron,
                input=self._sealer.seal(
                    dict(chosen.validate(dict(input or {}), settings=settings))
                ),
                timezone=timezone,
                key=key,
                on_conflict=RunConflict(on_conflict),
                tags=tuple(tags),
                jitter_seconds=jitter_seconds,
                catchup_window_seconds=catchup_window_seconds,
            ),
            limits,
        )
        self._calls[name] += 1
        origin = f"{self._run_id}/{name}#{self._calls[name]}"

        async def make() -> str:
            async with self._deps.sessions.unit(self._tenant_id) as uow:
                made = await schedules.create_schedule(
                    uow, spec, limits=limits, origin=origin, time=self._deps.time
                )
            return str(made.id)

        return await self._step(f"schedules.create:{name}", make)
