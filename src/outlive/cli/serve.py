"""`outlive api` and `outlive worker`: the two server processes."""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from outlive.cli.common import CliError, load_settings, run
from outlive.config import Settings

if TYPE_CHECKING:  # the CLI imports no worker until a worker starts (cold start)
    from outlive.worker import WorkerHost


def cmd_api(args: argparse.Namespace) -> None:
    if args.workers == 1:  # a supervisor opens no runtime: nothing would release it
        _hold_collection()
    import uvicorn

    from outlive.app import app_from_environment
    from outlive.serving import uvicorn_config

    settings = load_settings()
    settings.require_services()

    def stopped(signum: int, _: Any) -> None:
        raise SystemExit(0)

    # uvicorn shuts down gracefully on SIGTERM (open sockets get 1012), then re-raises the signal
    # to the handler it found: with this one, that graceful stop exits 0 (contract §1), not -15.
    signal.signal(signal.SIGTERM, stopped)
    if args.workers > 1:
        _serve_processes(settings, args)
        return
    server = uvicorn.Server(uvicorn_config(app_from_environment(), args.host, args.port, settings))
    server.run()
    if not server.started:
        raise CliError("the API did not start (see the log above)", 1)


def _hold_collection() -> None:
    """No garbage collection until the runtime is up (`telemetry.heap.hold`; its `open_runtime`
    releases it): the process's imports are nearly all objects that live as long as it does."""
    from outlive.telemetry import heap

    heap.hold()


def _serve_processes(settings: Settings, args: argparse.Namespace) -> None:
    """`--workers N`: uvicorn's supervisor; each process builds its app from the environment."""
    from uvicorn.supervisors import Multiprocess

    from outlive.serving import uvicorn_config
    from outlive.telemetry.metrics import multiprocess_directory

    config = uvicorn_config(
        "outlive.app:app_from_environment",
        args.host,
        args.port,
        settings,
        factory=True,
        workers=args.workers,
    )
    with multiprocess_directory():
        Multiprocess(config, sockets=[config.bind_socket()]).run()


def run_with_signals(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """`main(stop)` on a fresh loop (uvloop's where it is installed, as uvicorn's for the API);
    SIGINT and SIGTERM set `stop`.

    Why uvloop in the worker: a burst of wakes is a busy loop, and a timer in a busy loop fires
    late by the work ahead of it; uvloop's iterations are shorter (`bench/peers.py --only
    sleeps`: the in-process wait's overshoot 1.0 to 1.5 ms at p50 against 2.1 to 2.5 ms, see
    docs/measurements.md). A timer may fire a little early on it (libuv's clock is cached per
    iteration): a run's waits read the monotonic clock again (`Interrupts.pause`)."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    with asyncio.Runner(loop_factory=_loop_factory()) as loop_runner:
        loop_runner.run(runner())


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # Windows: asyncio's own
        return None
    return uvloop.new_event_loop


def cmd_worker(args: argparse.Namespace) -> None:
    _hold_collection()
    from outlive.worker import WorkerHost, run_until_stopped

    settings = load_settings()
    settings.require_services()
    if settings.directory_url is None:
        host = WorkerHost(settings, concurrency=args.concurrency)
        run_with_signals(lambda stop: run_until_stopped(host, stop))
        return
    hosts = cell_hosts(run(worker_cells(settings)), concurrency=args.concurrency)
    run_with_signals(lambda stop: run_until_stopped(hosts, stop))


def cell_hosts(cells: list[Settings], *, concurrency: int) -> list[WorkerHost]:
    """A host per cell: the first the process's own (the `worker` runtime: the lag probe, the
    sampler, `OUTLIVE_METRICS_PORT`), the others `worker-cell` runtimes (`outlive.runtime`)."""
    from outlive.worker import WorkerHost

    return [
        WorkerHost(cell, concurrency=concurrency, role="worker-cell" if n else "worker")
        for n, cell in enumerate(cells)
    ]


async def worker_cells(settings: Settings) -> list[Settings]:
    """The settings of each cell a worker serves (`OUTLIVE_CELLS`, else every cell of the
    directory): one `WorkerHost` each, so that leases, fencing and the relay stay transactions
    of one database (`cell_hosts`)."""
    from outlive.cells import cell_settings, served_cells
    from outlive.db.directory import Directory

    assert settings.directory_url is not None  # noqa: S101 (the caller checked)
    directory = await Directory.open(settings.directory_url)
    try:
        cells = await served_cells(directory, settings.cells)
    except LookupError as exc:
        raise CliError(str(exc), 2) from None
    finally:
        await directory.close()
    return [cell_settings(settings, cell) for cell in cells]
