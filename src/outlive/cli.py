"""The `outlive` command (contract §1): dev, migrate, api, worker, token, schema, cron.

Every failure is one line on stderr and a non-zero exit: 2 for bad input, 1 for a service that is
missing or unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from outlive.config import MissingServiceError, Settings
from outlive.errors import DomainError

log = logging.getLogger("outlive")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_TENANT = "demo"
DEMO_EMAIL = "demo@outlive.local"


class CliError(Exception):
    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def _fail(message: str, status: int) -> NoReturn:
    print(f"outlive: error: {message}", file=sys.stderr)  # noqa: T201
    raise SystemExit(status)


def _settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise CliError(" ".join(line.strip() for line in first[1:3]) or str(exc), 2) from None


# --- migrate ---------------------------------------------------------------------------------


def migrate(database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    ini = PROJECT_ROOT / "alembic.ini"
    if not ini.is_file():
        raise CliError(f"alembic.ini not found at {ini}: run outlive from its source checkout")
    config = Config(str(ini))
    config.attributes["database_url"] = database_url
    command.upgrade(config, "head")


def cmd_migrate(_: argparse.Namespace) -> None:
    settings = _settings()
    if not settings.database_url:
        raise CliError("DATABASE_URL is not set", 1)
    migrate(settings.database_url)
    print("migrated to head")  # noqa: T201


# --- token -----------------------------------------------------------------------------------


async def create_token(
    database_url: str, tenant: str, email: str, expires_in: timedelta | None = None
) -> str:
    from outlive.db.engine import create_engine, create_sessions
    from outlive.services.tenants import create_token as create

    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        async with create_sessions(engine).unit() as uow:
            _, token = await create(uow, tenant_slug=tenant, email=email, expires_in=expires_in)
        return token
    finally:
        await engine.dispose()


def cmd_token_create(args: argparse.Namespace) -> None:
    settings = _settings()
    if not settings.database_url:
        raise CliError("DATABASE_URL is not set", 1)
    token = asyncio.run(
        create_token(settings.database_url, args.tenant, args.email, args.expires_in)
    )
    lifetime = f", expires in {args.expires_in}" if args.expires_in else ""
    print(f"created a token for {args.email} in tenant {args.tenant}{lifetime} (shown once):")  # noqa: T201
    print(token)  # noqa: T201


# --- tenant limits ---------------------------------------------------------------------------


_KEEP = object()  # a limit left as it is (argparse applies `type` to string defaults only)


def _limit(value: str) -> int | None:
    if value == "default":
        return None
    number = _positive(value)
    if number > 2**31 - 1:  # the column is a PostgreSQL integer
        raise argparse.ArgumentTypeError(f"must be at most {2**31 - 1}")
    return number


async def set_tenant_limits(settings: Settings, slug: str, changes: dict[str, int | None]) -> str:
    """Set the caps, then admit what the new caps let through (when Redis is reachable)."""
    from outlive.db.engine import create_engine, create_sessions
    from outlive.services.tenants import set_limits

    database_url = settings.database_url
    if not database_url:
        raise CliError("DATABASE_URL is not set", 1)
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        async with create_sessions(engine).unit() as uow:
            limits = await set_limits(uow, tenant_slug=slug, changes=changes)
    finally:
        await engine.dispose()
    if settings.redis_url:
        await _dispatch(settings, limits.id)
    runs = limits.max_running_runs or f"default ({settings.tenant_max_running_runs})"
    jobs = limits.max_inflight_jobs or f"default ({settings.tenant_max_inflight_jobs})"
    return f"{limits.slug}: max-running-runs {runs}, max-inflight-jobs {jobs}"


async def _dispatch(settings: Settings, tenant_id: Any) -> None:
    from outlive.agents.registry import AgentRegistry
    from outlive.db.engine import create_engine, create_sessions
    from outlive.jobs.producer import SaqJobProducer
    from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue
    from outlive.jobs.run_instances import SaqRunInstances
    from outlive.services.admission import Limits, TenantAdmission

    database_url, redis_url = settings.require_services()
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    runs_queue, jobs_queue = (
        create_queue(redis_url, RUNS_QUEUE),
        create_queue(redis_url, JOBS_QUEUE),
    )
    sessions = create_sessions(engine).wired(jobs=SaqJobProducer(jobs_queue, settings))
    agents = AgentRegistry.from_entry_points(settings.agent_modules)
    admission = TenantAdmission(
        sessions, SaqRunInstances(runs_queue, settings), Limits.of(settings, len(agents))
    )
    try:
        await admission.dispatch_runs(tenant_id)
        await admission.dispatch_jobs(tenant_id)
    finally:
        for queue in (runs_queue, jobs_queue):
            await queue.disconnect()
        await engine.dispose()


def cmd_tenant_set_limits(args: argparse.Namespace) -> None:
    changes = {
        name: value
        for name, value in (
            ("max_running_runs", args.max_running_runs),
            ("max_inflight_jobs", args.max_inflight_jobs),
        )
        if value is not _KEEP
    }
    print(asyncio.run(set_tenant_limits(_settings(), args.tenant, changes)))  # noqa: T201


def cmd_token_list(args: argparse.Namespace) -> None:
    from outlive.cli_tokens import list_tokens

    settings = _settings()
    if not settings.database_url:
        raise CliError("DATABASE_URL is not set", 1)
    for line in asyncio.run(list_tokens(settings.database_url, args.tenant)):
        print(line)  # noqa: T201


def cmd_token_revoke(args: argparse.Namespace) -> None:
    from outlive.cli_tokens import NotAnnounced, revoke_token

    settings = _settings()
    database_url, redis_url = settings.require_services()
    try:
        print(asyncio.run(revoke_token(database_url, redis_url, args.id)))  # noqa: T201
    except NotAnnounced as exc:
        raise CliError(str(exc), 1) from None


# --- schema ----------------------------------------------------------------------------------


def cmd_schema(_: argparse.Namespace) -> None:
    from outlive.resolvers.schema import build_schema

    print(build_schema().as_str())  # noqa: T201


# --- cron ------------------------------------------------------------------------------------


def cmd_cron_list(_: argparse.Namespace) -> None:
    from outlive.cron.dispatch import function_name, task_name
    from outlive.cron.loading import load_table

    table = _load_cron(_settings().cron_table, load_table)
    for expression, tasks in table.items():
        names = ", ".join(task_name(t) for t in tasks)
        print(f"{expression:<16} {function_name(expression):<24} {names}")  # noqa: T201


def _load_cron(path: str, load: Callable[[str], Any]) -> Any:
    try:
        return load(path)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def cmd_cron_run(args: argparse.Namespace) -> None:
    import json

    from outlive.cron.loading import load_table

    settings = _settings()
    table = _load_cron(settings.cron_table, load_table)
    if args.expression not in table:
        known = ", ".join(repr(e) for e in table)
        raise CliError(f"no cron expression {args.expression!r} in the table (known: {known})", 2)
    settings.require_services()
    report = asyncio.run(_fire(settings, args.expression, table[args.expression]))
    print(json.dumps(report))  # noqa: T201
    if report["failed"]:
        raise CliError(f"{len(report['failed'])} task(s) failed: {report['failed']}", 1)


async def _fire(settings: Settings, expression: str, tasks: Any) -> dict[str, Any]:
    from outlive.cron.deps import CronDeps
    from outlive.cron.dispatch import run_tick
    from outlive.db.engine import create_engine, create_sessions
    from outlive.jobs.producer import SaqJobProducer
    from outlive.jobs.queues import JOBS_QUEUE, create_queue, create_redis
    from outlive.realtime.nudges import Publisher, channel_prefix

    database_url, redis_url = settings.require_services()
    pgbouncer = settings.db_pgbouncer
    engine = create_engine(database_url, pool_size=2, max_overflow=2, statement_cache=not pgbouncer)
    redis = create_redis(redis_url)
    queue = create_queue(redis_url, JOBS_QUEUE)
    publisher = Publisher(redis, prefix=channel_prefix(redis_url), enabled=settings.realtime)
    sessions = create_sessions(engine, autocommit=not pgbouncer).wired(
        nudge_sink=publisher.publish, jobs=SaqJobProducer(queue, settings)
    )
    try:
        deps = CronDeps(sessions=sessions, settings=settings, redis=redis)
        return (await run_tick(deps, expression, tasks)).as_dict()
    finally:
        await queue.disconnect()
        await redis.aclose()
        await engine.dispose()


# --- jobs: poison messages ---------------------------------------------------------------------


def cmd_jobs_rejected(args: argparse.Namespace) -> None:
    from outlive.admin import print_rejected

    settings = _settings()
    settings.require_services()
    asyncio.run(
        print_rejected(settings, include_redriven=args.all, limit=args.limit, as_json=args.json)
    )


def cmd_jobs_redrive(args: argparse.Namespace) -> None:
    from uuid import UUID

    from outlive.admin import redrive_rejected

    if not args.ids and not args.all:
        raise CliError("name the rejected jobs to redrive (IDs) or pass --all", 2)
    try:
        ids = [UUID(i) for i in args.ids]
    except ValueError:
        raise CliError(f"not a rejected job id: {' '.join(args.ids)}", 2) from None
    settings = _settings()
    settings.require_services()
    invalid, total = asyncio.run(redrive_rejected(settings, ids, every=args.all))
    if invalid:
        raise CliError(f"{invalid} of {total} rejected job(s) are still invalid", 1)


# --- api / worker / dev ----------------------------------------------------------------------


def _uvicorn_config(
    app: Any, host: str, port: int, settings: Settings | None = None, **overrides: Any
) -> Any:
    from outlive.serving import uvicorn_config

    return uvicorn_config(app, host, port, settings or _settings(), **overrides)


def cmd_api(args: argparse.Namespace) -> None:
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    settings = _settings()
    settings.require_services()

    def stopped(signum: int, _: Any) -> None:
        raise SystemExit(0)

    # uvicorn shuts down gracefully on SIGTERM (open sockets get 1012), then re-raises the signal
    # to the handler it found: with this one, that graceful stop exits 0 (contract §1), not -15.
    signal.signal(signal.SIGTERM, stopped)
    if args.workers > 1:
        config = _uvicorn_config(
            "outlive.app:app_from_environment",
            args.host,
            args.port,
            settings,
            factory=True,
            workers=args.workers,
        )
        from outlive.telemetry.metrics import multiprocess_directory

        with multiprocess_directory():
            Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    from outlive.app import app_from_environment

    server = uvicorn.Server(_uvicorn_config(app_from_environment(), args.host, args.port, settings))
    server.run()
    if not server.started:
        raise CliError("the API did not start (see the log above)", 1)


def _run_with_signals(main: Callable[[asyncio.Event], Any]) -> None:
    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    asyncio.run(runner())


def cmd_worker(args: argparse.Namespace) -> None:
    from outlive.worker import WorkerHost, run_until_stopped

    settings = _settings()
    settings.require_services()
    host = WorkerHost(settings, concurrency=args.concurrency)
    _run_with_signals(lambda stop: run_until_stopped(host, stop))


def cmd_dev(args: argparse.Namespace) -> None:
    import warnings

    from outlive.embedded import embedded_postgres, embedded_redis
    from outlive.web.build import ensure_built

    # pgserver asks platformdirs for a runtime directory it never uses; the warning is noise.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
    settings = _settings()
    state = Path.cwd() / ".outlive"
    with ExitStack() as stack:
        database_url = settings.database_url
        redis_url = settings.redis_url
        if not database_url:
            print("starting embedded PostgreSQL under ./.outlive/pg …", flush=True)  # noqa: T201
            database_url = stack.enter_context(embedded_postgres(state / "pg"))
        if not redis_url:
            print("starting embedded Redis under ./.outlive/redis …", flush=True)  # noqa: T201
            redis_url = stack.enter_context(embedded_redis(state / "redis"))
        settings = settings.model_copy(
            update={
                "database_url": database_url,
                "redis_url": redis_url,
                "public_url": f"http://{args.host}:{args.port}",
            }
        )
        migrate(database_url)
        ensure_built()
        token = asyncio.run(create_token(database_url, DEMO_TENANT, DEMO_EMAIL))
        _serve_dev(settings, args.host, args.port, token)


def _serve_dev(settings: Settings, host: str, port: int, token: str) -> None:
    import uvicorn

    from outlive.app import build_app
    from outlive.worker import WorkerHost

    worker = WorkerHost(settings, concurrency=16)
    url = f"http://{host}:{port}"

    async def start() -> None:
        await worker.start()
        # Last, once everything runs: the lines the user came for are the last on the screen.
        print(f"token: {token}")  # noqa: T201
        print(f"open {url}/#token={token}  (GraphiQL: {url}/graphql)", flush=True)  # noqa: T201

    app = build_app(settings, extra_lifespan=(start, worker.stop))
    uvicorn.Server(_uvicorn_config(app, host, port, settings, log_level="warning")).run()


# --- parsing ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (no usage block), as every other error here."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("outlive").strip()
        _fail(f"{command}: {message}" if command else message, 2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="outlive", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="everything in one process, for a laptop")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.set_defaults(func=cmd_dev)

    sub.add_parser("migrate", help="Alembic upgrade to head").set_defaults(func=cmd_migrate)

    api = sub.add_parser("api", help="the HTTP + WebSocket server only")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.add_argument("--workers", type=_positive, default=1)
    api.set_defaults(func=cmd_api)

    worker = sub.add_parser("worker", help="run workflows, jobs and cron only")
    worker.add_argument("--concurrency", type=_positive, default=32)
    worker.set_defaults(func=cmd_worker)

    token = sub.add_parser("token", help="API tokens")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    create = token_sub.add_parser("create", help="create a token (and the tenant and user)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--email", required=True)
    create.add_argument(
        "--expires-in",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="the token stops working after this long: 90m, 12h, 30d (default: never)",
    )
    create.set_defaults(func=cmd_token_create)
    listing = token_sub.add_parser("list", help="list tokens (never the tokens themselves)")
    listing.add_argument("--tenant", default=None, metavar="SLUG")
    listing.set_defaults(func=cmd_token_list)
    revoke = token_sub.add_parser("revoke", help="revoke a token everywhere, open sockets too")
    revoke.add_argument("id", metavar="ID")
    revoke.set_defaults(func=cmd_token_revoke)

    tenant = sub.add_parser("tenant", help="tenants")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True)
    limits = tenant_sub.add_parser(
        "set-limits", help="a tenant's caps: a number, or 'default' for the deployment's"
    )
    limits.add_argument("--tenant", required=True, help="the tenant's slug")
    limits.add_argument("--max-running-runs", type=_limit, default=_KEEP)
    limits.add_argument("--max-inflight-jobs", type=_limit, default=_KEEP)
    limits.set_defaults(func=cmd_tenant_set_limits)

    sub.add_parser("schema", help="print the GraphQL SDL").set_defaults(func=cmd_schema)

    jobs = sub.add_parser("jobs", help="the jobs queue's poison messages")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)
    rejected = jobs_sub.add_parser("rejected", help="list rejected (poison) jobs, newest first")
    rejected.add_argument("--all", action="store_true", help="include those already redriven")
    rejected.add_argument("--limit", type=_positive, default=50)
    rejected.add_argument("--json", action="store_true", help="one JSON object per line")
    rejected.set_defaults(func=cmd_jobs_rejected)
    redrive = jobs_sub.add_parser(
        "redrive", help="re-validate rejected jobs against today's envelopes; send the valid ones"
    )
    redrive.add_argument("ids", nargs="*", metavar="ID")
    redrive.add_argument("--all", action="store_true", help="every one not redriven yet")
    redrive.set_defaults(func=cmd_jobs_redrive)

    cron = sub.add_parser("cron", help="the cron dispatch table")
    cron_sub = cron.add_subparsers(dest="cron_command", required=True)
    cron_sub.add_parser("list", help="print the table").set_defaults(func=cmd_cron_list)
    fire = cron_sub.add_parser("run", help="fire one expression's tasks now")
    fire.add_argument("expression")
    fire.set_defaults(func=cmd_cron_run)
    return parser


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(value: str) -> timedelta:
    """`90m`, `12h`, `30d`, `45s` or plain seconds."""
    text = value.strip().lower()
    unit = _UNITS.get(text[-1:])
    number = text[:-1] if unit is not None else text
    try:
        amount = float(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration (90m, 12h, 30d)") from None
    if not 0 < amount <= 100 * 365 * 86400:
        raise argparse.ArgumentTypeError("must be positive (and under a century)")
    return timedelta(seconds=amount)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


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


def _setup_logs(command: str) -> None:
    """`OUTLIVE_LOG_FORMAT` when set; else JSON for the servers, text for people (dev, the rest).
    A settings error is reported by the command itself, with the usual one line."""
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


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    _setup_logs(args.command)
    try:
        args.func(args)
    except CliError as exc:
        _fail(str(exc), exc.status)
    except MissingServiceError as exc:
        _fail(str(exc), 1)
    except DomainError as exc:
        _fail(exc.message, 2)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as exc:
        message = _describe_unreachable(exc)
        if message is None:
            raise
        _fail(message, 1)


if __name__ == "__main__":
    main()
