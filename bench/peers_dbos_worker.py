"""DBOS Transact's side of `bench/peers.py`: one worker process.

    python bench/peers_dbos_worker.py <system database url> <worker concurrency> <executor id>

The same workflow as `peers_work.py` (steps, each a `@DBOS.step`, then an optional
`DBOS.sleep_async`), on a queue `peers` with the given per-process concurrency. Settings: DBOS's
defaults, which its documentation gives for production (queue polling every 1 s, the system
database's pool, LISTEN/NOTIFY on), printed on start. Each process has an executor id of its own:
a process started again with the id of one that crashed recovers that executor's pending
workflows, as DBOS does in production (or through its Conductor, not used here)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_body import body_done

QUEUE = "peers"


@DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]  # dbos: only in `peers`
async def peer_step(workflow: str, i: int, delay_ms: int, counter_file: str | None) -> int:
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
    body_done(counter_file, workflow, i)
    return i


@DBOS.workflow(name="peer")  # type: ignore[untyped-decorator, unused-ignore]
async def peer(
    steps: int, delay_ms: int = 0, sleep_s: float = 0, counter_file: str | None = None
) -> dict[str, Any]:
    workflow = DBOS.workflow_id or ""
    for i in range(steps):
        await peer_step(workflow, i, delay_ms, counter_file)
    if not sleep_s:
        return {"steps": steps}
    await DBOS.sleep_async(sleep_s)
    return {"wokeAt": time.time()}


def main() -> None:
    url, concurrency, executor = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    config: DBOSConfig = {
        "name": "peers",
        "system_database_url": url,
        "executor_id": executor,
        "application_version": "peers-1",
        "log_level": "WARNING",
    }
    print(json.dumps({"dbos_config": config, "queue": {"worker_concurrency": concurrency}}))
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency)
    print("dbos worker started", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
