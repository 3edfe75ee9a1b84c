"""`outlive dev`: everything in one process, for a laptop (embedded servers when none are set)."""

from __future__ import annotations

import argparse
import signal
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import NoReturn

from outlive.cli.common import load_settings, run
from outlive.cli.migrate import upgrade
from outlive.cli.tokens import create_token
from outlive.config import Settings

DEMO_TENANT = "demo"
DEMO_EMAIL = "demo@outlive.local"


def cmd_dev(args: argparse.Namespace) -> None:
    import warnings

    from outlive.embedded import embedded_postgres, embedded_redis
    from outlive.web.build import ensure_built

    # pgserver asks platformdirs for a runtime directory it never uses; the warning is noise.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
    signal.signal(signal.SIGTERM, _stop)
    settings = load_settings()
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
                "mail_log_links": True,  # a laptop's log: the invitation link, to click
            }
        )
        run(upgrade(settings))
        ensure_built()
        _, token = run(create_token(settings, DEMO_TENANT, DEMO_EMAIL))
        _serve(settings, args.host, args.port, token)


def _stop(signum: int, _frame: FrameType | None) -> NoReturn:
    """SIGTERM (a supervisor, `docker stop`, `kill`) ends `outlive dev` as ^C does: through the
    `ExitStack`, so that the embedded servers stop too. uvicorn shuts down gracefully on it and
    then raises the signal again; with SIGTERM's default action the process ended right there,
    leaving PostgreSQL and Redis running under ./.outlive/."""
    raise SystemExit(128 + signum)


def _serve(settings: Settings, host: str, port: int, token: str) -> None:
    """The API, with the worker started and stopped inside its lifespan (each enters its own
    runtime: the "api" one and the "worker" one)."""
    import uvicorn

    from outlive.app import build_app
    from outlive.serving import uvicorn_config
    from outlive.worker import WorkerHost

    worker = WorkerHost(settings, concurrency=16)
    url = f"http://{host}:{port}"

    async def start() -> None:
        await worker.start()
        # Last, once everything runs: the lines the user came for are the last on the screen.
        print(f"token: {token}")  # noqa: T201
        print(f"open {url}/#token={token}  (GraphiQL: {url}/graphql)", flush=True)  # noqa: T201

    # One process, one registry: the embedded worker serves OUTLIVE_METRICS_PORT for both.
    app = build_app(settings, extra_lifespan=(start, worker.stop), metrics_listener=False)
    uvicorn.Server(uvicorn_config(app, host, port, settings, log_level="warning")).run()
