"""The `outlive` command (contract §1): dev, migrate, api, worker, token, schema, cron, replay.

One module per command group; this one holds the argparse table and `main`. A command's module
is imported only when it runs, so `outlive schema` does not load the worker. Every command that
touches PostgreSQL or Redis enters `outlive.runtime.open_runtime`. Every failure is one line on
stderr and a non-zero exit: 2 for bad input, 1 for a service that is missing or unreachable.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any, NoReturn

from outlive.cli.common import KEEP, CliError, duration, limit, positive, slot_range
from outlive.cli.replay import add_parser as add_replay

__all__ = ["CliError", "main"]

Command = Callable[[argparse.Namespace], None]


def _fail(message: str, status: int) -> NoReturn:
    print(f"outlive: error: {message}", file=sys.stderr)  # noqa: T201
    raise SystemExit(status)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (no usage block), as every other error here."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("outlive").strip()
        _fail(f"{command}: {message}" if command else message, 2)


def _command(module: str, name: str) -> Command:
    """`outlive.cli.<module>.<name>`, imported when the command runs."""

    def command(args: argparse.Namespace) -> None:
        function: Command = getattr(import_module(f"outlive.cli.{module}"), name)
        function(args)

    return command


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="outlive", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="everything in one process, for a laptop")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.set_defaults(func=_command("dev", "cmd_dev"))

    migrate_ = sub.add_parser("migrate", help="Alembic upgrade to head")
    migrate_.set_defaults(func=_command("migrate", "cmd_migrate"))

    api = sub.add_parser("api", help="the HTTP + WebSocket server only")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.add_argument("--workers", type=positive, default=1)
    api.set_defaults(func=_command("serve", "cmd_api"))

    worker = sub.add_parser("worker", help="run workflows, jobs and cron only")
    worker.add_argument("--concurrency", type=positive, default=32)
    worker.set_defaults(func=_command("serve", "cmd_worker"))

    token = sub.add_parser("token", help="API tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="create a token (and the tenant and user)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--email", required=True)
    create.add_argument(
        "--expires-in",
        type=duration,
        default=None,
        metavar="DURATION",
        help="the token stops working after this long: 90m, 12h, 30d (default: never)",
    )
    create.add_argument(
        "--role",
        choices=("ADMIN", "OPERATOR", "VIEWER"),
        default=None,
        help="what the token may change (default: the member's role; ADMIN for a new member)",
    )
    create.set_defaults(func=_command("tokens", "cmd_token_create"))
    listing = token_sub.add_parser("list", help="list tokens (never the tokens themselves)")
    listing.add_argument("--tenant", default=None, metavar="SLUG")
    listing.set_defaults(func=_command("tokens", "cmd_token_list"))
    revoke = token_sub.add_parser("revoke", help="revoke a token everywhere, open sockets too")
    revoke.add_argument("id", metavar="ID")
    revoke.set_defaults(func=_command("tokens", "cmd_token_revoke"))

    tenant = sub.add_parser("tenant", help="tenants")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True)
    limits = tenant_sub.add_parser(
        "set-limits", help="a tenant's caps: a number, or 'default' for the deployment's"
    )
    limits.add_argument("--tenant", required=True, help="the tenant's slug")
    limits.add_argument("--max-running-runs", type=limit, default=KEEP)
    limits.add_argument("--max-inflight-jobs", type=limit, default=KEEP)
    limits.add_argument(
        "--llm-rate",
        default=KEEP,
        metavar="N/S",
        help="its own rate of the llm limit (N calls per S seconds), or 'default'",
    )
    limits.add_argument(
        "--llm-token-rate",
        default=KEEP,
        metavar="N/S",
        help="its own token rate of the llm limit (N tokens per S seconds), or 'default'",
    )
    limits.set_defaults(func=_command("tenants", "cmd_tenant_set_limits"))
    for verb, what in (("pause", "hold every run of"), ("resume", "let go of every run of")):
        paused = tenant_sub.add_parser(verb, help=f"{what} a tenant (as pauseRun does one)")
        paused.add_argument("slug", metavar="SLUG")
        paused.set_defaults(func=_command("tenants", f"cmd_tenant_{verb}"))
    keep = tenant_sub.add_parser(
        "set-retention", help="how many days a tenant's settled runs are kept (setRetention)"
    )
    keep.add_argument("slug", metavar="SLUG")
    keep.add_argument("days", metavar="DAYS", type=int)
    keep.set_defaults(func=_command("governance", "cmd_tenant_set_retention"))
    erase = tenant_sub.add_parser(
        "erase-subject", help="delete every run carrying a tag (eraseSubject); prints the receipt"
    )
    erase.add_argument("slug", metavar="SLUG")
    erase.add_argument("tag", metavar="TAG")
    erase.set_defaults(func=_command("governance", "cmd_tenant_erase_subject"))
    seal = tenant_sub.add_parser(
        "encrypt", help="seal a tenant's step results from now on (needs OUTLIVE_ENCRYPTION_KEY)"
    )
    seal.add_argument("slug", metavar="SLUG")
    seal.set_defaults(func=_command("governance", "cmd_tenant_encrypt"))
    rewrap = tenant_sub.add_parser(
        "rewrap", help="re-wrap every tenant's data key by OUTLIVE_ENCRYPTION_KEY (rotation)"
    )
    rewrap.add_argument("--old-key", required=True, help="the previous deployment key (base64)")
    rewrap.set_defaults(func=_command("governance", "cmd_tenant_rewrap"))

    add_replay(sub)

    _cell_commands(sub, tenant_sub)
    schema = sub.add_parser("schema", help="print the GraphQL SDL")
    schema.set_defaults(func=_command("schema", "cmd_schema"))

    jobs = sub.add_parser("jobs", help="the jobs queue's poison messages")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)
    rejected = jobs_sub.add_parser("rejected", help="list rejected (poison) jobs, newest first")
    rejected.add_argument("--all", action="store_true", help="include those already redriven")
    rejected.add_argument("--limit", type=positive, default=50)
    rejected.add_argument("--json", action="store_true", help="one JSON object per line")
    rejected.set_defaults(func=_command("jobs", "cmd_jobs_rejected"))
    redrive = jobs_sub.add_parser(
        "redrive", help="re-validate rejected jobs against today's envelopes; send the valid ones"
    )
    redrive.add_argument("ids", nargs="*", metavar="ID")
    redrive.add_argument("--all", action="store_true", help="every one not redriven yet")
    redrive.set_defaults(func=_command("jobs", "cmd_jobs_redrive"))

    cron = sub.add_parser("cron", help="the cron dispatch table")
    cron_sub = cron.add_subparsers(dest="cron_command", required=True)
    cron_sub.add_parser("list", help="print the table").set_defaults(
        func=_command("cron", "cmd_cron_list")
    )
    fire = cron_sub.add_parser("run", help="fire one expression's tasks now")
    fire.add_argument("expression")
    fire.set_defaults(func=_command("cron", "cmd_cron_run"))
    return parser


def _cell_commands(sub: Any, tenant_sub: Any) -> None:
    """The directory's, the cells' and the moves' commands (docs/cells.md)."""

    tenant_sub.add_parser("list", help="every tenant of every cell").set_defaults(
        func=_command("cells", "cmd_tenant_list")
    )
    move = tenant_sub.add_parser("move", help="move a tenant to another cell, live")
    move.add_argument("slug", metavar="SLUG")
    move.add_argument("--to", required=True, metavar="CELL")
    move.add_argument("--dry-run", action="store_true", help="print the rows and the hold")
    move.set_defaults(func=_command("cells", "cmd_tenant_move"))
    directory = sub.add_parser("directory", help="the directory of cells")
    directory_sub = directory.add_subparsers(dest="directory_command", required=True)
    directory_sub.add_parser("init", help="its tables; DATABASE_URL the default cell").set_defaults(
        func=_command("cells", "cmd_directory_init")
    )
    cell = sub.add_parser("cell", help="cells: PostgreSQL primaries of the directory")
    cell_sub = cell.add_subparsers(dest="cell_command", required=True)
    add = cell_sub.add_parser("add", help="register a migrated database as a cell")
    add.add_argument("name")
    add.add_argument("url", metavar="DATABASE_URL")
    add.add_argument("--slots", type=slot_range, default=None, metavar="A-B")
    add.set_defaults(func=_command("cells", "cmd_cell_add"))
    cell_sub.add_parser("list", help="the cells, their slots and tenants").set_defaults(
        func=_command("cells", "cmd_cell_list")
    )


def _describe_unreachable(exc: BaseException) -> str | None:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    if isinstance(exc, (OperationalError, InterfaceError, DBAPIError)):
        return f"cannot use PostgreSQL: {str(exc.orig or exc).splitlines()[0]}"
    if isinstance(exc, RedisConnectionError):
        return f"cannot reach Redis: {exc}"
    if isinstance(exc, OSError):
        return f"cannot reach a service: {exc}"
    return None


SERVERS = ("api", "worker", "dev")  # long-running: they log an outage as it goes (db.drivers)


def _setup_logs(command: str) -> None:
    """`OUTLIVE_LOG_FORMAT` when set; else JSON for the servers, text for people (dev, the rest).
    A settings error is reported by the command itself, with the usual one line."""
    from outlive.config import Settings
    from outlive.telemetry import logs

    try:
        settings = Settings()
    except ValueError:
        logs.setup("text")
        return
    default = "json" if command in ("api", "worker") else "text"
    logs.setup(
        settings.log_format or default,
        level=settings.log_level,
        libraries_level=settings.log_libraries_level,
    )
    if command not in SERVERS:  # a one-shot command says it in its one error line instead
        logging.getLogger("outlive.db.drivers").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse, then run the command. Parsing loads argparse and this package only: `--help` and
    a bad argument answer before pydantic, the settings or any command's code is imported."""
    args = _parser().parse_args(argv)
    from outlive.config import MissingServiceError
    from outlive.errors import DomainError, ServiceUnavailable

    _setup_logs(args.command)
    try:
        args.func(args)
    except CliError as exc:
        _fail(str(exc), exc.status)
    except MissingServiceError as exc:
        _fail(str(exc), 1)
    except ServiceUnavailable as exc:  # a service that cannot be reached: 1, not bad input
        reason = str(exc.__cause__ or "").strip().splitlines()  # the driver's words, one line
        _fail(exc.message + (f" ({reason[0]})" if reason else ""), 1)
    except DomainError as exc:
        _fail(exc.message, 2)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as exc:
        message = _describe_unreachable(exc)
        if message is None:
            raise
        _fail(message, 1)
