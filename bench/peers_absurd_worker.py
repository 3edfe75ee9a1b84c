"""Absurd's side of `bench/peers.py`: one worker process.

    python bench/peers_absurd_worker.py <database url> <concurrency> <worker id> <claim timeout s>

The same workflow as `peers_work.py`: a task `peer` whose steps are each a `ctx.step`, then an
optional `ctx.sleep_for`, on the queue `peers`. Started as Absurd's documentation gives for an
asyncio worker (`AsyncAbsurd.start_worker`): the given concurrency, a claim timeout (the lease a
crashed worker's tasks wait out before another worker may claim them; 120 s in its docs), its
default poll interval of 0.25 s. The worker id is the bench's, to tell which process holds what."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from absurd_sdk import AsyncAbsurd, AsyncTaskContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_body import body_done

QUEUE = "peers"
POLL_INTERVAL_S = 0.25  # absurd_sdk's default


def build(url: str) -> AsyncAbsurd:
    app = AsyncAbsurd(url, queue_name=QUEUE)

    @app.register_task(name="peer")  # type: ignore[untyped-decorator, unused-ignore]
    async def peer(params: dict[str, Any], ctx: AsyncTaskContext) -> dict[str, Any]:
        steps, delay_ms = int(params.get("steps", 10)), int(params.get("delay_ms", 0))
        counter_file = params.get("counter_file")
        for i in range(steps):

            async def body(i: int = i) -> int:
                if delay_ms:
                    await asyncio.sleep(delay_ms / 1000)
                body_done(counter_file, ctx.task_id, i)
                return i

            await ctx.step("s", body)
        sleep_s = float(params.get("sleep_s", 0))
        if not sleep_s:
            return {"steps": steps}
        await ctx.sleep_for("sleep", sleep_s)
        return {"wokeAt": time.time()}

    return app


async def main() -> None:
    url, concurrency, worker, claim_timeout = (
        sys.argv[1],
        int(sys.argv[2]),
        sys.argv[3],
        int(sys.argv[4]),
    )
    app = build(url)
    options = {
        "worker_id": worker,
        "claim_timeout": claim_timeout,
        "concurrency": concurrency,
        "poll_interval": POLL_INTERVAL_S,
    }
    print(json.dumps({"queue": QUEUE, "start_worker": options}))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, app.stop_worker)
    print("absurd worker started", flush=True)
    await app.start_worker(**options)  # type: ignore[arg-type, unused-ignore]
    await app.close()


if __name__ == "__main__":
    asyncio.run(main())
