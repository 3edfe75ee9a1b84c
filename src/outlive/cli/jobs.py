"""`outlive jobs rejected | redrive`: the jobs queue's poison messages, printed for people or,
with `--json`, one object per line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from uuid import UUID

from outlive.cli.common import CliError, load_settings, run
from outlive.config import Settings
from outlive.errors import NotFound
from outlive.jobs.redrive import Redriven, RejectedRecord, list_rejected, pending_ids, redrive
from outlive.runtime import open_runtime


def _line(r: RejectedRecord) -> str:
    error = r.error.splitlines()[0][:100] if r.error else ""
    done = f" redriven as {r.redriven_as}" if r.redriven_as else ""
    return (
        f"{r.id}  {r.received_at:%Y-%m-%d %H:%M:%S}  {r.type or '-':<24} "
        f"tries={r.redrive_attempts}{done}  {error}"
    )


async def print_rejected(
    settings: Settings, *, include_redriven: bool, limit: int, as_json: bool
) -> None:
    async with open_runtime(settings, "cli") as runtime:
        found = await list_rejected(
            runtime.sessions, include_redriven=include_redriven, limit=limit
        )
    for record in found:
        text = json.dumps(dataclasses.asdict(record), default=str) if as_json else _line(record)
        print(text)  # noqa: T201
    if not as_json:
        print(f"{len(found)} rejected job(s)", file=sys.stderr)  # noqa: T201


def cmd_jobs_rejected(args: argparse.Namespace) -> None:
    settings = load_settings()
    run(print_rejected(settings, include_redriven=args.all, limit=args.limit, as_json=args.json))


async def redrive_rejected(settings: Settings, ids: list[UUID], *, every: bool) -> tuple[int, int]:
    """(still invalid, tried); prints one line per rejected job."""
    async with open_runtime(settings, "cli-queues") as runtime:
        sessions = runtime.sessions
        waiting = await pending_ids(sessions)
        missing = [str(i) for i in ids if i not in set(waiting)]
        if missing and not every:
            raise NotFound(f"no rejected job waiting for a redrive: {', '.join(missing)}")
        results = [await redrive(sessions, job_id) for job_id in (waiting if every else ids)]
    for r in results:
        print(_outcome(r))  # noqa: T201
    return sum(r.result == "invalid" for r in results), len(results)


def _outcome(r: Redriven) -> str:
    if r.result == "sent":
        return f"{r.id} sent again as {r.sent_as}"
    if r.result == "invalid":
        return f"{r.id} still invalid, recorded again: {r.error}"
    return f"{r.id} not redriven (already redriven, or another redrive has it)"


def cmd_jobs_redrive(args: argparse.Namespace) -> None:
    if not args.ids and not args.all:
        raise CliError("name the rejected jobs to redrive (IDs) or pass --all", 2)
    try:
        ids = [UUID(i) for i in args.ids]
    except ValueError:
        raise CliError(f"not a rejected job id: {' '.join(args.ids)}", 2) from None
    invalid, total = run(redrive_rejected(load_settings(), ids, every=args.all))
    if invalid:
        raise CliError(f"{invalid} of {total} rejected job(s) are still invalid", 1)
