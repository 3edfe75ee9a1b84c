"""Benchmark: Outlive beside its peers, DBOS Transact, Restate and Absurd, on the same work.

    uv sync --group peers     # the peers' SDKs; not a default group
    uv run --group peers python bench/peers.py [--rounds 3] [--systems outlive,dbos,restate,absurd]
        [--only crash,restart,throughput,step,sleeps,windmill] [--count 1000]

One system runs at a time, and the order alternates from round to round. Outlive, DBOS and
Absurd each get a database of their own on the same PostgreSQL server; Restate keeps its own log
and state, in a `restate-server` of its own per part (`peers_restate.py`: installed from npm on
first use, skipped with a message when npm or the package is missing). The work is the same
workflow for all: `steps` steps whose bodies append `<workflow> <step>` to a file, then an
optional durable sleep (`peers_work.py` for Outlive, `peers_<system>_worker.py` for the peers).
One worker process at concurrency 32 unless said otherwise. Settings: each system's recommended
production settings, printed at the start of each system's part and described in its adapter's
docstring (`peers_<system>.py`): Outlive's defaults; DBOS's queue with `worker_concurrency=32`
and its defaults; Restate's server defaults (its production profile less auto-provisioning, a
single node) with its deployment served as its docs give for production (Hypercorn, HTTP/2);
Absurd's asyncio worker at concurrency 32 with its documented claim timeout of 120 s.

1. `crash` (a kill with a surviving worker): 20 workflows of 10 steps of 300 ms on two worker
   processes; once every workflow has finished 2 steps, the worker holding the most is SIGKILLed
   and started again at once (as a supervisor would); the time from the kill until all 20 are
   done, and the step bodies that finished twice (a body that finished while its result was not
   recorded yet runs again). The same batch undisturbed, timed from the same moment, is the
   baseline: what is left of the work then (about 8 steps, 2.4 s) is the floor of any recovery,
   and the difference is the time the kill cost. DBOS recovers a dead executor's workflows when a
   process with its executor id starts again; Outlive's other worker takes them over as soon as
   PostgreSQL ended the dead process's session (docs/liveness.md); Restate's server retries the
   invocations on its deployment, whose other process takes the new connection; Absurd's tasks
   wait for their lease (the claim timeout) to expire.
2. `restart` (a single worker restarted): the same batch on one worker process, SIGKILLed and
   started again at once (a pod restarted, a deploy on one machine): the time from the kill until
   all 20 are done, the same baseline, the bodies finished twice. Here every system waits for
   its new process to start.
3. `throughput`: `--count` (1,000) workflows of 10 steps (no delay) submitted at once to a running
   worker: workflows/s from the first submit to the last done, submit -> done p50/p99, and the
   server CPU meanwhile (PostgreSQL's backends serving the system's database; Restate: its
   server process).
4. `step`: one workflow of 200 steps alone: the time per step (first to last step completion, as
   each system recorded it).
5. `sleeps`: `--count` workflows that each sleep durably for 5 s: lateness p50/p99, the wall
   clock at which the workflow went on after the sleep minus the wake time the system recorded
   for it (Outlive: the `waiting` event's `until`; DBOS: its `DBOS.sleep` operation's output;
   Restate: the journal's `wake_up_time`; Absurd: the sleep's checkpoint). Outlive parks a
   sleeping run (its worker slot is free) and hands it back `OUTLIVE_WAKE_LEAD_S` before it is
   due; DBOS sleeps in the process, holding a slot of its queue, so its sleeps go 32 at a time;
   Restate suspends the invocation and invokes it again when the timer fires; Absurd suspends the
   task, whose run a worker claims again once due (it polls every 0.25 s).
6. `windmill` (Windmill's published shape: 400 lightweight tasks on one worker): one workflow of
   400 sequential steps of 10 ms on one worker: submit -> done, against the 4 s of pure work,
   and what each step cost over its 10 ms.

Figures from a machine shared with other work compare systems within one run only.
Needs PostgreSQL and Redis (BENCH_DATABASE_URL, BENCH_REDIS_URL; default the local ones).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import table
from _peers import CRASH, CpuMeter, System, pct, tree_cpu_s

SYSTEMS = ("outlive", "dbos", "restate", "absurd")
PARTS = ("crash", "restart", "throughput", "step", "sleeps", "windmill")
TITLES = {"outlive": "Outlive", "dbos": "DBOS", "restate": "Restate", "absurd": "Absurd"}


async def crash(system: System, logs: Path, kill: bool, workers: int) -> dict[str, float]:
    """The crash batch on `workers` processes; with `kill` False, the same batch undisturbed
    (the baseline: what is left of the work once every workflow has finished 2 steps, timed from
    that moment). Keys are prefixed `restart_` for one worker."""
    key = "" if workers > 1 else "restart_"
    counter = Path(tempfile.mkstemp(prefix=f"peers-{system.name}-", suffix=".txt")[1])
    phase = f"{key or 'crash_'}{'kill' if kill else 'undisturbed'}"  # a log each: `started`
    for i in range(workers):
        system.start_worker(logs / f"{system.name}-{phase}-{i}.log")
    for i in range(workers):
        await system.started(logs / f"{system.name}-{phase}-{i}.log")
    payload = {"steps": CRASH["steps"], "delay_ms": CRASH["delay_ms"], "counter_file": str(counter)}
    ids = await system.submit(CRASH["workflows"], payload)
    deadline = time.monotonic() + 120
    while True:
        done = await system.steps_done(ids)
        if len(done) == len(ids) and min(done.values()) >= 2:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{system.name}: the workflows never all got going")
        await asyncio.sleep(0.05)
    if not kill:
        began = time.time()
        finished = await system.finished(ids, timeout=300)
        await asyncio.to_thread(counter.unlink)
        return {f"{key}undisturbed_s": max(d.done for d in finished) - began}
    victim = await system.holder_of_most(ids)
    system.workers[victim].send_signal(signal.SIGKILL)
    killed = time.time()
    system.workers[victim].wait()
    system.restart(victim, logs / f"{system.name}-{phase}-restarted.log")  # a supervisor would
    finished = await system.finished(ids, timeout=300)
    lines = (await asyncio.to_thread(counter.read_text)).splitlines()
    await asyncio.to_thread(counter.unlink)
    return {
        f"{key}recovery_s": max(d.done for d in finished) - killed,
        f"{key}twice": len(lines) - len(set(lines)),
    }


async def throughput(system: System, count: int) -> dict[str, float]:
    workers = CpuMeter(lambda: tree_cpu_s([w.pid for w in system.workers]))
    async with system.cpu() as cpu, workers:
        ids = await system.submit(count, {"steps": 10})
        done = await system.finished(ids, timeout=600)
    first = min(d.submitted for d in done)
    last = max(d.done for d in done)
    latency = [d.done - d.submitted for d in done]
    return {
        "per_s": count / (last - first),
        "p50_s": pct(latency, 50),
        "p99_s": pct(latency, 99),
        "cpu_s": cpu.seconds,
        "worker_cpu_s": workers.seconds,
    }


async def one_step(system: System) -> dict[str, float]:
    ids = await system.submit(1, {"steps": 200})
    await system.finished(ids, timeout=300)
    times = (await system.step_times(ids[0]))[-200:]
    return {"step_ms": (times[-1] - times[0]) / (len(times) - 1) * 1000}


async def sleeps(system: System, count: int) -> dict[str, float]:
    ids = await system.submit(count, {"steps": 0, "sleep_s": 5.0})
    done = await system.finished(ids, timeout=600)
    due = await system.wake_times(ids)
    late = [float(d.output["wokeAt"]) - due[d.id] for d in done]
    span = max(d.done for d in done) - min(d.submitted for d in done)
    return {
        "late_p50_ms": pct(late, 50) * 1000,
        "late_p99_ms": pct(late, 99) * 1000,
        "sleeps_all_s": span,
    }


async def windmill(system: System) -> dict[str, float]:
    """Windmill's shape: 400 sequential steps of 10 ms in one workflow on one worker."""
    ids = await system.submit(1, {"steps": 400, "delay_ms": 10})
    (done,) = await system.finished(ids, timeout=600)
    total = done.done - done.submitted
    return {"windmill_s": total, "windmill_over_ms": (total - 4.0) / 400 * 1000}


@contextlib.asynccontextmanager
async def system_for(name: str, tenants: int) -> AsyncIterator[System]:
    """A fresh instance of system `name` (its adapter imported here: each needs its own SDK)."""
    system: contextlib.AbstractAsyncContextManager[System]
    if name == "outlive":
        from peers_outlive import outlive_system

        system = outlive_system(tenants)
    elif name == "dbos":
        from peers_dbos import dbos_system

        system = dbos_system()
    elif name == "restate":
        from peers_restate import restate_system, server_binary

        binary = server_binary()
        if binary is None:
            raise RuntimeError("no restate-server")
        system = restate_system(binary)
    else:
        from peers_absurd import absurd_system

        system = absurd_system()
    async with system as ready:
        yield ready


async def measure(name: str, only: set[str], count: int, logs: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    printed = False

    def settings(system: System) -> None:
        nonlocal printed
        if not printed:
            print(f"  {system.settings_text()}", flush=True)
            printed = True

    for part, workers, key in (("crash", 2, ""), ("restart", 1, "restart_")):
        if part not in only:
            continue
        for kill in (True, False):
            async with system_for(name, CRASH["workflows"]) as system:
                settings(system)
                figures |= await crash(system, logs, kill, workers)
        figures[f"{key}lost_s"] = figures[f"{key}recovery_s"] - figures[f"{key}undisturbed_s"]
    if only & {"throughput", "step", "sleeps", "windmill"}:
        async with system_for(name, count) as system:
            settings(system)
            system.start_worker(logs / f"{name}-worker.log")
            await system.started(logs / f"{name}-worker.log")
            if "throughput" in only:
                figures |= await throughput(system, count)
            if "step" in only:
                figures |= await one_step(system)
            if "windmill" in only:
                figures |= await windmill(system)
            if "sleeps" in only:
                figures |= await sleeps(system, count)
    return figures


ROWS = (
    ("crash: kill -> all 20 done, a worker survives (s)", "recovery_s", "{:.2f}"),
    ("crash: the same batch, no kill (s)", "undisturbed_s", "{:.2f}"),
    ("crash: time lost to the kill (s)", "lost_s", "{:.2f}"),
    ("crash: step bodies finished twice", "twice", "{:.0f}"),
    ("restart: kill -> all 20 done, one worker (s)", "restart_recovery_s", "{:.2f}"),
    ("restart: the same batch, no kill (s)", "restart_undisturbed_s", "{:.2f}"),
    ("restart: time lost to the kill (s)", "restart_lost_s", "{:.2f}"),
    ("restart: step bodies finished twice", "restart_twice", "{:.0f}"),
    ("throughput: workflows/s (10 steps)", "per_s", "{:.0f}"),
    ("submit -> done p50 (s)", "p50_s", "{:.2f}"),
    ("submit -> done p99 (s)", "p99_s", "{:.2f}"),
    ("server CPU (s)", "cpu_s", "{:.1f}"),
    ("worker CPU (s)", "worker_cpu_s", "{:.1f}"),
    ("one step (ms)", "step_ms", "{:.2f}"),
    ("400 steps of 10 ms, submit -> done (s; 4 s of work)", "windmill_s", "{:.2f}"),
    ("400 steps of 10 ms: cost a step over its 10 ms (ms)", "windmill_over_ms", "{:.2f}"),
    ("sleep 5 s lateness p50 (ms)", "late_p50_ms", "{:.1f}"),
    ("sleep 5 s lateness p99 (ms)", "late_p99_ms", "{:.1f}"),
    ("sleeps: first submit -> all done (s)", "sleeps_all_s", "{:.1f}"),
)


def report(rounds: list[dict[str, dict[str, float]]], systems: list[str]) -> str:
    peers = [s for s in systems if s != "outlive"] if "outlive" in systems else []
    rows = []
    for label, key, fmt in ROWS:
        cells = [_cell(rounds, name, key, fmt) for name in systems]
        if set(cells) != {"-"}:
            rows.append([label, *cells, *(_ratios(rounds, key, peer) for peer in peers)])
    headers = [
        "measure",
        *(f"{TITLES[s]} median (range)" for s in systems),
        *(f"Outlive/{TITLES[p]} by round" for p in peers),
    ]
    return table(rows, headers)


def _cell(rounds: list[dict[str, dict[str, float]]], name: str, key: str, fmt: str) -> str:
    values = [r[name][key] for r in rounds if key in r.get(name, {})]
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _ratios(rounds: list[dict[str, dict[str, float]]], key: str, peer: str) -> str:
    """Outlive's figure over the peer's, in each round where both have it (same run, same load)."""
    pairs = [(r.get("outlive", {}).get(key), r.get(peer, {}).get(key)) for r in rounds]
    return ", ".join(f"{o / p:.2f}" for o, p in pairs if o is not None and p) or "-"


def available(systems: list[str]) -> list[str]:
    """The systems that can run here: Restate needs its server (installed from npm if it can)."""
    if "restate" not in systems:
        return systems
    from peers_restate import cache_dir, server_binary

    if server_binary() is None:
        print(
            "restate: SKIPPED, no restate-server: `npm` is missing or could not install"
            f" @restatedev/restate-server into {cache_dir()}; set RESTATE_SERVER to a binary",
            flush=True,
        )
        return [s for s in systems if s != "restate"]
    return systems


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default=",".join(PARTS))
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="one alone: a quick loop, no comparison"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(PARTS) or set(args.systems.split(",")) - set(SYSTEMS):
        parser.error(f"--only takes {','.join(PARTS)}; --systems takes {','.join(SYSTEMS)}")
    systems = available(args.systems.split(","))
    logs = Path(tempfile.mkdtemp(prefix="outlive-peers-"))
    print(f"logs in {logs}; a shared machine: compare within this run only")
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else systems[::-1]
        this: dict[str, dict[str, float]] = {}
        for name in order:
            print(f"round {r + 1}: {name}", flush=True)
            into = logs / f"round-{r + 1}"  # a log of its own per round: "started" is per round
            into.mkdir(exist_ok=True)
            this[name] = await measure(name, only, args.count, into)
            print(f"  {json.dumps({k: round(v, 3) for k, v in this[name].items()})}", flush=True)
        rounds.append(this)
    print(report(rounds, systems))


if __name__ == "__main__":
    asyncio.run(main())
