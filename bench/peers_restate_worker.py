"""Restate's side of `bench/peers.py`: one service process (the "worker"), served by Hypercorn.

    python bench/peers_restate_worker.py <port>

The same workflow as `peers_work.py`: a handler `peer/run` whose steps are each a `ctx.run`,
then an optional `ctx.sleep`. Served as Restate's documentation gives for production: Hypercorn
over HTTP/2 with `h2_max_concurrent_streams`, `keep_alive_max_requests` and `keep_alive_timeout`
at their most. Its docs scale a deployment with Hypercorn's `workers`, processes that share one
listening socket (SO_REUSEPORT); the bench starts each process itself, bound the same way, so
that it can SIGKILL one and start it again: the server's connections then go to the others."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import restate
from hypercorn.asyncio import serve
from hypercorn.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_body import body_done

peer = restate.Service("peer")

HYPERCORN = {  # Restate's production configuration for Hypercorn, less `bind` and `workers`
    "h2_max_concurrent_streams": 2147483647,
    "keep_alive_max_requests": 2147483647,
    "keep_alive_timeout": 2147483647,
}


async def peer_step(workflow: str, i: int, delay_ms: int, counter_file: str | None) -> int:
    if delay_ms:
        await asyncio.sleep(delay_ms / 1000)
    body_done(counter_file, workflow, i)
    return i


@peer.handler()  # type: ignore[untyped-decorator, unused-ignore]  # restate: only in `peers`
async def run(ctx: restate.Context, params: dict[str, Any]) -> dict[str, Any]:
    workflow = ctx.request().id
    steps, delay_ms = int(params.get("steps", 10)), int(params.get("delay_ms", 0))
    counter_file = params.get("counter_file")
    for i in range(steps):
        await ctx.run_typed(
            "s", peer_step, restate.RunOptions(), workflow, i, delay_ms, counter_file
        )
    sleep_s = float(params.get("sleep_s", 0))
    if not sleep_s:
        return {"steps": steps}
    await ctx.sleep(timedelta(seconds=sleep_s))
    return {"wokeAt": time.time()}


app = restate.app(services=[peer])


def main() -> None:
    port = int(sys.argv[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    config = Config.from_mapping({**HYPERCORN, "bind": [f"fd://{sock.fileno()}"]})
    print(json.dumps({"hypercorn": HYPERCORN, "port": port}))
    print("restate worker started", flush=True)
    asyncio.run(serve(app, config))


if __name__ == "__main__":
    main()
