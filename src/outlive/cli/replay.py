"""`outlive replay`: replays recorded runs against the code installed now, offline (contract §1;
`outlive.workflows.replay` says how and what each verdict means).

One line per run (`<run id>  <agent>  <status>  <verdict>`), newest first, then a line counting
each verdict; `--json`: one object per run and a last `{"summary": ...}`, one per line. Exit 0
when no run diverged, 1 when one did (`diverged` or `output invalid`: a deploy gate), 2 on bad
input. Every status by default; a deploy gate wants the runs that will resume on the new code:
`--status QUEUED,RUNNING,WAITING`. The agents are those a worker would serve here (entry points
and `OUTLIVE_AGENT_MODULES`); the `llm` agent replays without `OUTLIVE_LLM_BASE_URL` (it is
never called). The heavy modules are imported when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from outlive.cli.common import CliError, duration, load_settings, positive, run

if TYPE_CHECKING:
    from outlive.config import Settings
    from outlive.services.runs.recorded import Filters
    from outlive.workflows.live import LiveResult
    from outlive.workflows.replay import Verdict

STATUSES = ("QUEUED", "RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED")
OFFLINE_LLM = "http://offline.invalid/v1"  # never reached: the journal answers every call


def statuses(value: str) -> list[str]:
    """`S,…`: run statuses."""
    found = [s.strip().upper() for s in value.split(",") if s.strip()]
    unknown = [s for s in found if s not in STATUSES]
    if unknown or not found:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or value!r} is not a run status (one of {', '.join(STATUSES)})"
        )
    return found


def add_parser(sub: Any) -> None:
    """The `replay` command's arguments (called by `outlive.cli._parser`)."""
    replay = sub.add_parser("replay", help="replay recorded runs against the installed code")
    replay.add_argument("--agent", default=None, help="runs of this agent only")
    replay.add_argument("--status", type=statuses, default=[], metavar="S,…")
    replay.add_argument("--tenant", default=None, metavar="SLUG", help="runs of this tenant only")
    for flag, what in (("--since", "newer"), ("--newer-than", "newer"), ("--older-than", "older")):
        replay.add_argument(
            flag,
            type=duration,
            default=None,
            dest=f"{what}_than" if flag != "--since" else "since",
            metavar="AGE",
            help=f"runs created {'within' if what == 'newer' else 'before'} this age: 7d, 12h",
        )
    replay.add_argument("--limit", type=positive, default=1000, help="newest first (1000)")
    replay.add_argument("--json", action="store_true", help="one JSON object per line")
    replay.add_argument(
        "--live-from",
        default=None,
        metavar="STEP",
        help="re-execute STEP and what follows with the real model; writes nothing",
    )
    replay.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> None:
    from outlive.services.runs.recorded import Filters

    if args.since is not None and args.newer_than is not None:
        raise CliError("give --since or --newer-than, not both", 2)
    now = datetime.now(UTC)
    newer: timedelta | None = args.since or args.newer_than
    filters = Filters(
        agent=args.agent,
        statuses=args.status,
        newer_than=None if newer is None else now - newer,
        older_than=None if args.older_than is None else now - args.older_than,
        tenant=args.tenant,
        limit=args.limit,
    )
    if args.live_from is not None:
        results = run(live(load_settings(), filters, args.live_from))
        if print_live(results, as_json=args.json):
            raise SystemExit(1)
        return
    verdicts, refused = run(replay(load_settings(), filters))
    diverged = print_verdicts(verdicts, refused, as_json=args.json)
    if diverged:
        raise SystemExit(1)


async def replay(settings: Settings, filters: Filters) -> tuple[list[Verdict], int]:
    """Read the runs (read only), then replay them offline: the verdicts and how many network
    calls the guard refused."""
    from outlive.agents.registry import AgentRegistry
    from outlive.runtime import open_runtime
    from outlive.services import sealing
    from outlive.services.runs.recorded import read_recorded
    from outlive.workflows.offline import Guard
    from outlive.workflows.replay import replay_runs

    registry = AgentRegistry.from_entry_points(
        settings.agent_modules, builtin=settings.builtin_agents
    )
    if not settings.llm_base_url:
        settings = settings.model_copy(update={"llm_base_url": OFFLINE_LLM})
    async with open_runtime(settings, "cli") as runtime:
        if filters.tenant is not None and not await _tenant_exists(runtime.sessions, filters):
            raise CliError(f"no tenant {filters.tenant!r}", 2)
        recorded = await read_recorded(runtime.sessions, filters, kek=sealing.kek_of(settings))
    guard = Guard()
    return await replay_runs(recorded, registry, settings, guard), guard.refused


async def _tenant_exists(sessions: Any, filters: Filters) -> bool:
    from sqlalchemy import text

    row = await sessions.one(text("SELECT 1 FROM tenants WHERE slug = :s"), s=filters.tenant)
    return row is not None


def print_verdicts(verdicts: list[Verdict], refused: int, *, as_json: bool) -> int:
    """Print them and the counts; the number that diverged (or whose output is invalid)."""
    from outlive.workflows.replay import KINDS

    counts: dict[str, int] = {kind: sum(1 for v in verdicts if v.kind == kind) for kind in KINDS}
    for v in verdicts:
        line = (
            json.dumps(v.as_json())
            if as_json
            else f"{v.run_id}  {v.agent}  {v.status}  {v.verdict}"
        )
        print(line)  # noqa: T201
    summary: dict[str, int] = {**counts, "runs": len(verdicts), "networkRefused": refused}
    if as_json:
        print(json.dumps({"summary": summary}))  # noqa: T201
    else:
        parts = ", ".join(f"{kind} {n}" for kind, n in counts.items())
        tail = f"({len(verdicts)} run(s) replayed offline; {refused} network call(s) refused)"
        print(f"{parts} {tail}")  # noqa: T201
    sys.stdout.flush()
    return counts["diverged"] + counts["output invalid"]


async def live(settings: Settings, filters: Filters, step: str) -> list[LiveResult]:
    """`--live-from STEP`: each run re-executed from `step` on, one after the other, writing
    nothing (`outlive.workflows.live`); the tenant's rate limits taken in Redis when configured,
    its budgets read before each live step."""
    import httpx

    from outlive.agents.registry import AgentRegistry
    from outlive.runtime import open_runtime
    from outlive.services import sealing
    from outlive.services.budgets import list_budgets
    from outlive.services.limits import NamedLimits
    from outlive.services.runs.recorded import read_recorded
    from outlive.workflows.live import live_run

    registry = AgentRegistry.from_entry_points(
        settings.agent_modules, builtin=settings.builtin_agents
    )
    role: Any = "cli-queues" if settings.redis_url else "cli"
    results = []
    async with open_runtime(settings, role) as runtime, httpx.AsyncClient() as http:
        sessions = runtime.sessions
        if filters.tenant is not None and not await _tenant_exists(sessions, filters):
            raise CliError(f"no tenant {filters.tenant!r}", 2)
        queues = runtime.queues
        limits = None if queues is None else NamedLimits(queues.redis, sessions, settings)
        for recorded in await read_recorded(sessions, filters, kek=sealing.kek_of(settings)):
            budgets = await list_budgets(sessions, recorded.run.tenant_id)
            results.append(
                await live_run(
                    recorded,
                    registry,
                    settings,
                    live_from=step,
                    http=http,
                    limits=limits,
                    budgets=budgets,
                )
            )
    return results


def print_live(results: list[LiveResult], *, as_json: bool) -> int:
    """Old and new output side by side; the number of runs whose new code failed."""
    failed = sum(1 for r in results if (r.stopped or "").startswith("failed"))
    for r in results:
        if as_json:
            print(json.dumps(r.as_json(), default=str))  # noqa: T201
            continue
        spent = f"{r.spent.requests} model call(s), {r.spent.tokens} token(s)"
        print(f"{r.run_id}  {r.agent}  {r.status}  {spent}")  # noqa: T201
        print(f"  old: {json.dumps(r.old, default=str)}")  # noqa: T201
        new = r.stopped if r.stopped else json.dumps(r.new, default=str)
        print(f"  new: {new if r.reached or r.stopped else new + '  (never reached the step)'}")  # noqa: T201
    if not as_json:
        print(f"{len(results)} run(s) re-executed, {failed} failed")  # noqa: T201
    return failed
