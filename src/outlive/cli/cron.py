"""`outlive cron list | run`: the dispatch table, and one expression's tasks fired now."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from outlive.cli.common import CliError, load_settings, run
from outlive.config import Settings
from outlive.cron.deps import CronDeps, CronTask
from outlive.cron.dispatch import function_name, run_tick, task_name
from outlive.cron.loading import load_table
from outlive.runtime import open_runtime


def _load(path: str) -> Mapping[str, Sequence[CronTask]]:
    try:
        return load_table(path)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def cmd_cron_list(_: argparse.Namespace) -> None:
    for expression, tasks in _load(load_settings().cron_table).items():
        names = ", ".join(task_name(t) for t in tasks)
        print(f"{expression:<16} {function_name(expression):<24} {names}")  # noqa: T201


async def fire(settings: Settings, expression: str, tasks: Sequence[CronTask]) -> dict[str, Any]:
    """Run one expression's tasks now, as a tick of the worker would; the tick's report."""
    async with open_runtime(settings, "cli-queues") as runtime:
        deps = CronDeps(
            sessions=runtime.sessions, settings=settings, redis=runtime.require_queues().redis
        )
        return (await run_tick(deps, expression, tasks)).as_dict()


def cmd_cron_run(args: argparse.Namespace) -> None:
    settings = load_settings()
    table = _load(settings.cron_table)
    if args.expression not in table:
        known = ", ".join(repr(e) for e in table)
        raise CliError(f"no cron expression {args.expression!r} in the table (known: {known})", 2)
    settings.require_services()
    report = run(fire(settings, args.expression, table[args.expression]))
    print(json.dumps(report))  # noqa: T201
    if report["failed"]:
        raise CliError(f"{len(report['failed'])} task(s) failed: {report['failed']}", 1)
