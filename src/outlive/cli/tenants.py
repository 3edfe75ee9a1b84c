"""`outlive tenant set-limits` (a tenant's caps, then what the new caps let through) and `outlive
tenant pause|resume` (hold every run of a tenant, or let them go)."""

from __future__ import annotations

import argparse

from outlive.cli.cell_of import tenant_cell
from outlive.cli.common import KEEP, load_settings, run
from outlive.config import Settings
from outlive.db.ports import NO_INSTANCES
from outlive.runtime import Role, open_runtime
from outlive.services import pauses
from outlive.services.limits import parse_rate, set_llm_rate, set_llm_token_rate
from outlive.services.tenants import set_limits


async def set_tenant_limits(
    settings: Settings,
    slug: str,
    changes: dict[str, int | None],
    llm_rate: str | None = None,
    llm_token_rate: str | None = None,
) -> str:
    """Set the caps (and the tenant's `llm` rates, of calls and of tokens: "N/S" or "default"),
    then admit what the new caps let through (when Redis is configured)."""
    settings = await tenant_cell(settings, slug)
    role: Role = "cli-queues" if settings.redis_url else "cli"
    async with open_runtime(settings, role) as runtime, runtime.sessions.unit() as uow:
        limits = await set_limits(uow, tenant_slug=slug, changes=changes)
        if llm_rate is not None:
            await set_llm_rate(uow, tenant_slug=slug, rate=parse_rate(llm_rate))
        if llm_token_rate is not None:
            await set_llm_token_rate(uow, tenant_slug=slug, rate=parse_rate(llm_token_rate))
        uow.admit_after_commit(limits.id, "runs", queue_down_raises=True)
        uow.admit_after_commit(limits.id, "jobs", queue_down_raises=True)
    runs = limits.max_running_runs or f"default ({settings.tenant_max_running_runs})"
    jobs = limits.max_inflight_jobs or f"default ({settings.tenant_max_inflight_jobs})"
    return f"{limits.slug}: max-running-runs {runs}, max-inflight-jobs {jobs}"


def cmd_tenant_set_limits(args: argparse.Namespace) -> None:
    changes = {
        name: value
        for name, value in (
            ("max_running_runs", args.max_running_runs),
            ("max_inflight_jobs", args.max_inflight_jobs),
        )
        if value is not KEEP
    }
    llm_rate = None if args.llm_rate is KEEP else args.llm_rate
    tokens = None if args.llm_token_rate is KEEP else args.llm_token_rate
    print(run(set_tenant_limits(load_settings(), args.tenant, changes, llm_rate, tokens)))  # noqa: T201


async def pause_tenant(settings: Settings, slug: str, *, paused: bool) -> str:
    """Hold (or let go of) every run of the tenant, in PostgreSQL; the line to print."""
    settings = await tenant_cell(settings, slug)
    role: Role = "cli-queues" if settings.redis_url else "cli"
    async with open_runtime(settings, role) as runtime:
        instances = runtime.queues.instances if runtime.queues is not None else NO_INSTANCES
        async with runtime.sessions.unit() as uow:
            moved = await pauses.pause_tenant(uow, slug, paused=paused, instances=instances)
    if paused:
        return f"{slug}: paused; {moved} active run(s) held (new runs are held at their first step)"
    return f"{slug}: resumed; {moved} run(s) let go"


def cmd_tenant_pause(args: argparse.Namespace) -> None:
    print(run(pause_tenant(load_settings(), args.slug, paused=True)))  # noqa: T201


def cmd_tenant_resume(args: argparse.Namespace) -> None:
    print(run(pause_tenant(load_settings(), args.slug, paused=False)))  # noqa: T201
