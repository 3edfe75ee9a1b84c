"""Cold start: how long `outlive --help` takes, what it imports, and how long `outlive worker` and
`outlive api` take from spawn to ready (issue 47: ≤ 0.3 s and ≤ 1 s on a quiet machine).

    uv run python bench/cold_start.py [--rounds 5]

- `--help`: wall time of the whole process (interpreter included), and its modules (`-X
  importtime`'s cumulative time of `outlive.cli`, and how many modules it loaded);
- worker: spawn to the log line `worker started` (its first poll of the queue follows at once);
- api: spawn to the first 200 of `/readyz` (polled every 10 ms).

Medians and ranges over the rounds; each on a database and Redis db of its own (`_common`).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, free_port, outlive

READY_LINE = b"worker started"


def help_time() -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "outlive.cli", "--help"], capture_output=True, check=True)
    return time.perf_counter() - began


def help_imports() -> tuple[float, int]:
    """`outlive.cli`'s cumulative import time (s) and the modules `--help` loaded."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "outlive.cli", "--help"],
        capture_output=True,
        check=True,
    )
    lines = done.stderr.decode().splitlines()
    cumulative = 0.0
    for line in lines:
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s+outlive\.cli$", line)
        if found:
            cumulative = int(found.group(1)) / 1e6
    return cumulative, sum(1 for line in lines if line.startswith("import time:")) - 1


async def worker_ready(env: dict[str, str], log: Path) -> float:
    began = time.perf_counter()
    with outlive("worker", "--concurrency", "4", env=env, log=log) as process:
        while READY_LINE not in await asyncio.to_thread(log.read_bytes):
            if process.poll() is not None:
                raise RuntimeError(f"outlive worker exited; see {log}")
            await asyncio.sleep(0.01)
        return time.perf_counter() - began


async def api_ready(env: dict[str, str]) -> float:
    port = free_port()
    began = time.perf_counter()
    with outlive("api", "--port", str(port), env=env) as process:
        async with httpx.AsyncClient() as client:
            while True:
                try:
                    if (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        return time.perf_counter() - began
                except httpx.HTTPError:
                    pass
                if process.poll() is not None:
                    raise RuntimeError("outlive api exited")
                await asyncio.sleep(0.01)


def show(label: str, values: list[float], unit: str = "s") -> None:
    median = statistics.median(values)
    print(f"{label:<34} {median:7.3f} {unit}  (range {min(values):.3f}-{max(values):.3f})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    helps = [help_time() for _ in range(rounds)]
    imports = [help_imports() for _ in range(rounds)]
    workers, apis = [], []
    async with bench_env() as env:
        with TemporaryDirectory() as tmp:
            for i in range(rounds):
                workers.append(await worker_ready(env.vars(), Path(tmp) / f"worker-{i}.log"))
                apis.append(await api_ready(env.vars(OUTLIVE_METRICS="false")))
    show("outlive --help (process)", helps)
    show("outlive.cli imports (-X importtime)", [i[0] for i in imports])
    print(f"{'modules loaded by --help':<34} {imports[0][1]:7d}")
    show("outlive worker: spawn to ready", workers)
    show("outlive api: spawn to /readyz 200", apis)


if __name__ == "__main__":
    asyncio.run(main())
