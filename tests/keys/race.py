"""The key race of issue 27: 2 API processes and several workers, K keys x S `startRun` each,
all fired at once, once per strategy; optionally under rolling worker SIGKILLs.

Each strategy gets keys of its own (`<strategy>:<k>`) so the rounds do not meet. While a round
runs, a sampler reads every key's RUNNING and WAITING runs every 10 ms. Then the database is
checked against the strategy's promise (`check_round`): ENQUEUE runs every run, one at a time
per key, in the order the starts committed (read off the `queuedBehindId` each start answered);
CANCEL_PREVIOUS leaves exactly one SUCCEEDED run per key, and every other run of the key settled
before it started; REJECT writes
exactly one run per key and answers RUN_ACTIVE to every other start; SIGNAL_EXISTING loses no
input (each is a run's input or a signal in the run it was handed). Every strategy: nothing
doubled (each run's `turn` event once), nothing stranded (everything settles).

`tests/keys/test_race.py` runs it at a size CI affords; `bench/keys_race.py` at 100 x 20.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import text

from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from outlive.services.tenants import create_token
from tests.chaos.harness import Fleet

START = """mutation($i: StartRunInput!) {
  startRun(input: $i) { created run { id key queuedBehindId } } }"""
STRATEGIES = ("ENQUEUE", "CANCEL_PREVIOUS", "REJECT", "SIGNAL_EXISTING")


@dataclass(frozen=True)
class Race:
    keys: int = 20
    starts: int = 10
    apis: int = 2
    workers: int = 2
    kill_every_s: float | None = None  # rolling worker SIGKILLs
    settle_timeout_s: float = 240.0
    seed: int = 27
    heartbeat_s: float | None = None  # OUTLIVE_RUN_HEARTBEAT_S; None: the default (10 s)


@dataclass
class Round:
    strategy: str
    answers: list[dict[str, Any]] = field(default_factory=list)  # {i, key, input, data|error}
    overlaps: list[tuple[str, int]] = field(default_factory=list)  # (key, runs active at once)
    samples: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def env_of(database_url: str, redis_url: str, heartbeat_s: float | None = None) -> dict[str, str]:
    """The fleet's settings. The lease is the default one (10 s): a SIGKILLed worker's runs are
    taken over through its liveness lock at once, whatever the lease. A 1 s lease, as before
    liveness, made the race's own CPU starvation a fault: a heartbeat late by a fraction of a
    second stops its attempt before the lease can expire, and the run counts a lost attempt
    that no kill caused."""
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "OUTLIVE_RECONCILE_GRACE_S": "2",
        "OUTLIVE_RUN_RETRY_DELAY_S": "0.5",
        "OUTLIVE_SHUTDOWN_GRACE_S": "1",
        "OUTLIVE_RATE_START_RUN": "off",
        "OUTLIVE_RATE_SIGNAL_RUN": "off",
        "OUTLIVE_LOG_FORMAT": "text",
    } | ({} if heartbeat_s is None else {"OUTLIVE_RUN_HEARTBEAT_S": str(heartbeat_s)})


def _input(strategy: str, i: int) -> dict[str, Any]:
    """Each start's input is told apart by `childIndex`, its marker (`i`; `demo` only echoes it
    in the output). The runs that must succeed under SIGKILLs (ENQUEUE, SIGNAL_EXISTING) are
    steps of 100 ms, as a durable agent's work is: CONTRACT section 7 never fails a run that
    makes progress for losing workers, and that promise is what the race holds the fleet to. A
    run that is one step of a second, killed three times before finishing it, is failed by the
    same rule, rightly: a poison run looks no different (`tests/workflows/test_lease.py`)."""
    if strategy == "REJECT":  # long enough that every start meets the first run
        return {"turns": 1, "delayMs": 8_000, "childIndex": i}
    if strategy == "CANCEL_PREVIOUS":  # a cancel is seen between turns: many short turns
        return {"turns": 40, "delayMs": 100, "childIndex": i}
    if strategy == "SIGNAL_EXISTING":  # waits 1 s for a signal, then settles
        return {
            "turns": 10,
            "delayMs": 100,
            "awaitSignal": "input",
            "signalTimeoutS": 1,
            "childIndex": i,
        }
    return {"turns": 10, "delayMs": 100, "childIndex": i}


async def _fire(fleet: Fleet, token: str, race: Race, rnd: Round) -> None:
    """Every start of the round at once, spread over the API processes; a failed request (an
    API that could not answer) is sent again, as a client would. One HTTP client per key: at
    100 x 20 a single client's pool held 2,000 queued requests, and httpcore assigns queued
    requests to connections by walking all of both on every change (encode/httpcore#1035): the
    bench's client spun at 100% CPU for 23 minutes and no run was written."""
    headers = {"Authorization": f"Bearer {token}"}
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(timeout=60)) for _ in range(race.keys)
        ]
        await asyncio.gather(
            *(
                _start(clients[k], fleet, headers, k * race.starts + s, f"{rnd.strategy}:{k}", rnd)
                for s in range(race.starts)
                for k in range(race.keys)
            )
        )


async def _start(
    http: httpx.AsyncClient, fleet: Fleet, headers: dict[str, str], i: int, key: str, rnd: Round
) -> None:
    """Start `i` of `key`, answered and recorded."""
    body = {
        "agent": "demo",
        "input": _input(rnd.strategy, i),
        "key": key,
        "onConflict": rnd.strategy,
    }
    for attempt in range(20):
        url = fleet.apis[(i + attempt) % len(fleet.apis)].url
        try:
            response = await http.post(
                f"{url}/graphql",
                json={"query": START, "variables": {"i": body}},
                headers=headers,
            )
            answer = response.json()
        except (httpx.HTTPError, ValueError):
            await asyncio.sleep(0.2)
            continue
        errors = answer.get("errors") or []
        if errors and errors[0].get("extensions", {}).get("code") != "RUN_ACTIVE":
            await asyncio.sleep(0.2)
            continue
        rnd.answers.append(
            {
                "i": i,
                "key": key,
                "input": body["input"],
                "data": answer.get("data"),
                "error": errors[0] if errors else None,
            }
        )
        return
    rnd.problems.append(f"start {i} of {key} never got an answer")


async def _sample(sessions: Sessions, tenant_id: str, rnd: Round, stop: asyncio.Event) -> None:
    """Every 10 ms: the keys of this round with more than one run RUNNING or WAITING."""
    statement = text(
        "SELECT key, count(*) AS n FROM runs WHERE tenant_id = CAST(:t AS uuid)"
        " AND key LIKE :prefix AND status IN ('RUNNING', 'WAITING') GROUP BY key"
        " HAVING count(*) > 1"
    )
    while not stop.is_set():
        for row in await sessions.all(statement, t=tenant_id, prefix=f"{rnd.strategy}:%"):
            rnd.overlaps.append((row["key"], row["n"]))
        rnd.samples += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.01)


async def _settled(sessions: Sessions, tenant_id: str, strategy: str, deadline: float) -> bool:
    statement = text(
        "SELECT count(*) AS n FROM runs WHERE tenant_id = CAST(:t AS uuid) AND key LIKE :prefix"
        " AND status IN ('QUEUED', 'RUNNING', 'WAITING')"
    )
    while time.monotonic() < deadline:
        row = await sessions.one(statement, t=tenant_id, prefix=f"{strategy}:%")
        if row is not None and row["n"] == 0:
            return True
        await asyncio.sleep(0.25)
    return False


async def _killing(fleet: Fleet, every_s: float, rng: random.Random, stop: asyncio.Event) -> int:
    """Rolling SIGKILLs, as a rolling restart goes: the next worker is killed only once the last
    one's replacement is up, and then after `every_s` (from 0.5x to 1.5x). Killing faster than
    replacements start leaves a fleet that spends its life starting (`_input` says why the runs
    are made of short steps)."""
    kills = 0
    while not stop.is_set():
        await fleet.replaced()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s * rng.uniform(0.5, 1.5))
        if not stop.is_set() and await fleet.kill_a_worker(rng):
            kills += 1
    return kills


async def _tenant(database_url: str) -> tuple[str, str]:
    engine = create_engine(database_url, pool_size=2, max_overflow=0)
    sessions = create_sessions(engine)
    async with sessions.unit() as uow:
        principal, token = await create_token(
            uow, tenant_slug="keys-race", email="owner@keys-race.test"
        )
    async with sessions.unit() as uow:  # a cap that never holds the race back
        await uow.execute(
            text("UPDATE tenants SET max_running_runs = 100000 WHERE id = :t"),
            t=principal.tenant.id,
        )
    await engine.dispose()
    return str(principal.tenant.id), token


@contextlib.asynccontextmanager
async def _fleet(race: Race, env: dict[str, str]) -> AsyncIterator[Fleet]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as workdir:
        fleet = Fleet(env, Path(workdir))
        try:
            await asyncio.gather(
                *(fleet.start("api") for _ in range(race.apis)),
                *(fleet.start("worker") for _ in range(race.workers)),
            )
            yield fleet
        finally:
            await fleet.close()


async def run_race(
    race: Race, database_url: str, redis_url: str, strategies: tuple[str, ...] = STRATEGIES
) -> list[Round]:
    tenant_id, token = await _tenant(database_url)
    engine = create_engine(database_url, pool_size=4, max_overflow=0)
    sessions = create_sessions(engine)
    rounds = []
    try:
        async with _fleet(race, env_of(database_url, redis_url, race.heartbeat_s)) as fleet:
            for strategy in strategies:
                rnd = Round(strategy)
                began = time.monotonic()
                stop = asyncio.Event()
                sampler = asyncio.create_task(_sample(sessions, tenant_id, rnd, stop))
                killer = None
                if race.kill_every_s is not None:
                    rng = random.Random(race.seed)
                    killer = asyncio.create_task(_killing(fleet, race.kill_every_s, rng, stop))
                await _fire(fleet, token, race, rnd)
                if not await _settled(
                    sessions, tenant_id, strategy, time.monotonic() + race.settle_timeout_s
                ):
                    rnd.problems.append(f"{strategy}: runs still active (stranded)")
                stop.set()
                await sampler
                if killer is not None:
                    await killer
                rnd.seconds = time.monotonic() - began
                rnd.problems += await check_round(sessions, tenant_id, race, rnd)
                rounds.append(rnd)
    finally:
        await engine.dispose()
    return rounds


async def _runs(sessions: Sessions, tenant_id: str, strategy: str) -> dict[str, dict[str, Any]]:
    statement = text(
        "SELECT r.id::text AS id, r.key, r.status, r.error, r.input, r.started_at, r.finished_at,"
        " r.created_at, (SELECT count(*) - count(DISTINCT e.data->>'turn') FROM run_events e"
        "   WHERE e.run_id = r.id AND e.type = 'turn') AS doubled,"
        " ARRAY(SELECT s.payload::text FROM run_signals s WHERE s.run_id = r.id) AS signals,"
        " ARRAY(SELECT e.data->>'reason' FROM run_events e"
        "   WHERE e.run_id = r.id AND e.type = 'lost' ORDER BY e.seq) AS losses"
        " FROM runs r WHERE r.tenant_id = CAST(:t AS uuid) AND r.key LIKE :prefix"
    )
    found = await sessions.all(statement, t=tenant_id, prefix=f"{strategy}:%")
    return {row["id"]: dict(row) for row in found}


def _lines(answers: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each key's created runs in the order their starts committed: a run answered with
    `queuedBehindId` X came right after X; a run answered as head starts a new stretch."""
    after: dict[str, str] = {}
    heads: dict[str, list[str]] = defaultdict(list)
    for a in answers:
        if a["data"] and a["data"]["startRun"]["created"]:
            run = a["data"]["startRun"]["run"]
            if run["queuedBehindId"] is None:
                heads[a["key"]].append(run["id"])
            else:
                after[run["queuedBehindId"]] = run["id"]
    lines: dict[str, list[str]] = {}
    for key, starts in heads.items():
        line: list[str] = []
        for head in starts:
            at: str | None = head
            while at is not None:
                line.append(at)
                at = after.get(at)
        lines[key] = line
    return lines


async def check_round(sessions: Sessions, tenant_id: str, race: Race, rnd: Round) -> list[str]:
    runs = await _runs(sessions, tenant_id, rnd.strategy)
    problems = [f"run {i} ran {r['doubled']} turns twice" for i, r in runs.items() if r["doubled"]]
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs.values():
        by_key[run["key"]].append(run)
    check = {
        "ENQUEUE": _check_enqueue,
        "CANCEL_PREVIOUS": _check_cancel_previous,
        "REJECT": _check_reject,
        "SIGNAL_EXISTING": _check_signal_existing,
    }[rnd.strategy]
    return problems + check(race, rnd, runs, by_key)


def _not_succeeded(runs: dict[str, Any]) -> list[str]:
    """Each run that did not succeed, with how each of its lost attempts was found."""
    return [
        f"{i} is {r['status']}: {r['error']}"
        + (f" (lost: {'; '.join(r['losses'])})" if r["losses"] else "")
        for i, r in runs.items()
        if r["status"] != "SUCCEEDED"
    ]


def _check_enqueue(
    race: Race, rnd: Round, runs: dict[str, Any], by_key: dict[str, list[Any]]
) -> list[str]:
    problems = [f"{k}: {n} runs RUNNING or WAITING at once" for k, n in rnd.overlaps]
    if len(runs) != race.keys * race.starts:
        problems.append(f"ENQUEUE wrote {len(runs)} runs, not {race.keys * race.starts}")
    problems += _not_succeeded(runs)
    for key, line in _lines(rnd.answers).items():
        if len(line) != race.starts:
            problems.append(f"{key}: a line of {len(line)} runs, not {race.starts}")
        for ahead, after in itertools.pairwise(line):
            a, b = runs[ahead], runs[after]
            if a["finished_at"] is None or b["started_at"] is None:
                continue
            if b["started_at"] < a["finished_at"]:
                problems.append(f"{key}: {after} started before {ahead} (ahead of it) settled")
    return problems


def _check_cancel_previous(
    race: Race, rnd: Round, runs: dict[str, Any], by_key: dict[str, list[Any]]
) -> list[str]:
    problems = []
    for key, members in by_key.items():
        won = [r for r in members if r["status"] == "SUCCEEDED"]
        others = {r["status"] for r in members if r["status"] != "SUCCEEDED"}
        if len(won) != 1 or others - {"CANCELLED"}:
            problems.append(f"{key}: {len(won)} SUCCEEDED, the others {sorted(others)}")
            continue
        survivor = won[0]  # the newest: everything else of its key settled before it started
        late = [
            r for r in members if r is not survivor and r["finished_at"] > survivor["started_at"]
        ]
        if late:
            problems.append(f"{key}: {len(late)} runs settled after the survivor started")
    if len(by_key) != race.keys:
        problems.append(f"CANCEL_PREVIOUS: {len(by_key)} keys have runs, not {race.keys}")
    return problems


def _check_reject(
    race: Race, rnd: Round, runs: dict[str, Any], by_key: dict[str, list[Any]]
) -> list[str]:
    refused = [a for a in rnd.answers if a["error"] is not None]
    problems = []
    if len(runs) != race.keys:
        problems.append(f"REJECT wrote {len(runs)} runs, not {race.keys}")
    if len(refused) != race.keys * (race.starts - 1):
        problems.append(f"{len(refused)} RUN_ACTIVE, not {race.keys * (race.starts - 1)}")
    for a in refused:
        named = a["error"]["extensions"].get("runId")
        if named not in runs or runs[named]["key"] != a["key"]:
            problems.append(f"RUN_ACTIVE for {a['key']} names {named}, not its key's run")
    return problems


def _check_signal_existing(
    race: Race, rnd: Round, runs: dict[str, Any], by_key: dict[str, list[Any]]
) -> list[str]:
    problems = _not_succeeded(runs)

    for a in rnd.answers:
        started = a["data"]["startRun"]
        run = runs.get(started["run"]["id"])
        marker = a["input"]["childIndex"]
        if run is None:
            problems.append(f"start {a['i']}: its run is missing")
        elif started["created"]:
            if run["input"]["childIndex"] != marker:
                problems.append(f"start {a['i']}: its run has another input")
        elif not any(json.loads(s).get("childIndex") == marker for s in run["signals"]):
            problems.append(f"start {a['i']}: its input was lost (no signal {marker})")
    return problems
