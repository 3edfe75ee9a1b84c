"""PostgreSQL fails over under load and nothing is lost (issue 41, docs/postgres-ha.md).

A cluster of the test's own (`tests/db/patroni.py`: etcd, two PostgreSQL 15 nodes under Patroni
in synchronous mode, HAProxy). Clients send `startRun` without pause (10-turn `demo` runs, each
its own key) to an API on one path to the primary (the multi-host `DATABASE_URL` or HAProxy)
while two real workers run them, one on each path. Then the primary's postmaster is SIGKILLed
and Patroni promotes the standby (or `patronictl switchover` moves the primary on purpose).
Afterwards:

- every answer was a success or 503 `SERVICE_UNAVAILABLE` with `retryAfter`: never a 500,
  another error or a hang;
- the API answers normally again within 5 s of the promotion;
- every `startRun` that answered success is a run in the database, and every run there
  settles exactly once, SUCCEEDED (0 lost, 0 doubled, 0 stranded, 0 FAILED);
- each turn's `turn` event is there exactly once: no step recorded before the failover ran
  again;
- no live worker's run was handed again because its liveness lock vanished with the old
  primary (no `lost` event "its worker process ended", no "handed again" in the workers' logs);
- each worker's liveness connection, relay `LISTEN` and cancels `LISTEN` came back by
  themselves, on the new primary.

`OUTLIVE_FAILOVER_ROUNDS=10` fails the same cluster over ten times in a row (each round's old
primary comes back as the standby); one round in CI. Each round prints its figures (with `-s`),
and appends them to `OUTLIVE_FAILOVER_FIGURES` when set (a JSON line each).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.raw import create_pool, prepare
from outlive.db.tx import Sessions
from outlive.errors import ServiceUnavailable
from tests.conftest import make_settings, new_tenant
from tests.db.patroni import Node, PatroniCluster
from tests.support import Api, Servers, TenantHandle
from tests.workflows.test_liveness import WorkerLogs, start_worker, stop, until_logged

pytestmark = pytest.mark.timeout(900)

ROUNDS = int(os.environ.get("OUTLIVE_FAILOVER_ROUNDS", "1"))
FIGURES = os.environ.get("OUTLIVE_FAILOVER_FIGURES")
RUN = {"turns": 10, "delayMs": 50}
START = """mutation($input: StartRunInput!) {
  startRun(input: $input) { created run { id } } }"""
CLIENTS = 4
PAUSE_S = 0.2  # between one client's requests
REQUEST_TIMEOUT_S = 15.0  # longer is a hang
BEFORE_S = 2.5  # of load before the fault
AFTER_S = 6.0  # of load after the promotion
NORMAL_WITHIN_S = 5.0
GONE = "its worker process ended"  # the `lost` reason of a liveness verdict

RUNS = prepare(
    text(
        """SELECT r.id::text AS id, r.status, r.lost_attempts,
          (SELECT count(*) FROM run_events e WHERE e.run_id = r.id
            AND e.type IN ('succeeded', 'failed', 'cancelled')) AS settles,
          (SELECT count(*) FROM run_events e WHERE e.run_id = r.id AND e.type = 'turn') AS turns,
          (SELECT count(DISTINCT e.data->>'turn') FROM run_events e
            WHERE e.run_id = r.id AND e.type = 'turn') AS distinct_turns,
          (SELECT count(*) FROM run_events e WHERE e.run_id = r.id AND e.type = 'lost'
            AND e.data->>'reason' = :gone) AS gone
        FROM runs r WHERE r.tenant_id = ANY(CAST(:tenants AS uuid[]))"""
    )
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    with PatroniCluster.running() as running:
        yield running


@pytest.fixture(scope="module")
async def own(cluster: PatroniCluster) -> AsyncIterator[Sessions]:
    """The test's own sessions on the cluster, through the multi-host URL: they follow it too."""
    engine = create_engine(cluster.hosts_url, pool_size=2)
    pool = await create_pool(cluster.hosts_url, max_size=2)
    yield create_sessions(engine, raw=pool)
    await pool.close()
    await engine.dispose()


@dataclass
class Answer:
    sent: float  # monotonic
    done: float
    outcome: str  # "ok", "503", or what else came back


@dataclass
class Load:
    """Clients sending startRun without pause, each answer recorded."""

    api: Api
    tenants: list[TenantHandle]
    answers: list[Answer] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def client(self, tenant: TenantHandle) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            variables = {"input": {"agent": "demo", "input": RUN, "key": secrets.token_hex(8)}}
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    response = await self.api.post(START, variables, token=tenant.token)
                outcome = _outcome(response.status_code, response.json())
            except TimeoutError:
                outcome = "hang"
            if outcome == "ok":
                self.acked.append(response.json()["data"]["startRun"]["run"]["id"])
            self.answers.append(Answer(sent, time.monotonic(), outcome))
            await asyncio.sleep(PAUSE_S)

    def oks(self) -> int:
        return sum(a.outcome == "ok" for a in self.answers)


def _outcome(status: int, body: dict[str, Any]) -> str:
    errors = body.get("errors") or []
    if status == 200 and not errors and body["data"]["startRun"]["created"]:
        return "ok"
    if status == 503 and len(errors) == 1:
        extensions = errors[0].get("extensions") or {}
        if extensions.get("code") == "SERVICE_UNAVAILABLE" and extensions.get("retryAfter", 0) > 0:
            return "503"
    return f"{status} {json.dumps(body)[:300]}"


async def _until(check: Any, what: str, timeout: float) -> Any:
    """Processes and Patroni announce nothing to this test: look every 50 ms."""
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        await asyncio.sleep(0.05)
    return found


async def _promoted(cluster: PatroniCluster, node: Node) -> float:
    """When `node` answers Patroni's primary check (monotonic)."""
    await _until(lambda: asyncio.to_thread(cluster.is_primary, node), "the promotion", 120)
    return time.monotonic()


async def _fault(cluster: PatroniCluster, fault: str, leader: Node) -> None:
    if fault == "kill":
        cluster.kill_postmaster(leader)
    else:
        done = await asyncio.to_thread(cluster.switchover, cluster.other(leader))
        assert done.returncode == 0, done.stdout + done.stderr


async def one_round(
    cluster: PatroniCluster,
    own: Sessions,
    settings: Settings,
    logs: WorkerLogs,
    *,
    fault: str,
    api_via: str,
) -> dict[str, Any]:
    leader = await asyncio.to_thread(cluster.until_healthy)
    tenants = [await new_tenant(own, "failover") for _ in range(CLIENTS)]
    offsets = [path.stat().st_size for path, _ in logs]
    api_settings = settings.model_copy(update={"database_url": cluster.url(via=api_via)})
    async with Api.running(api_settings) as api:
        load = Load(api, tenants)
        clients = [asyncio.create_task(load.client(t)) for t in tenants]
        try:
            await asyncio.sleep(BEFORE_S)  # a steady load before the fault: a duration
            assert load.oks() > 0, [a.outcome for a in load.answers]
            faulted = time.monotonic()
            promoted_task = asyncio.create_task(_promoted(cluster, cluster.other(leader)))
            await _fault(cluster, fault, leader)
            promoted = await promoted_task
            await asyncio.sleep(AFTER_S)  # the load goes on after the promotion: a duration
        finally:
            load.stop.set()
            await asyncio.gather(*clients)
    runs = await _settled(own, tenants)
    await _until(lambda: _back(own, len(logs)), "each worker's own sessions on the new primary", 30)
    figures = _figures(load, runs, fault=fault, api_via=api_via, faulted=faulted, promoted=promoted)
    _check(load, runs, figures)
    for (path, _), offset in zip(logs, offsets, strict=True):
        logged = path.read_bytes()[offset:].decode(errors="replace")
        assert "whose worker process is gone" not in logged, f"{path.name} handed a live run"
    return figures


SESSIONS = prepare(
    text(
        "SELECT application_name AS name, count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database()"
        " AND application_name IN ('outlive-liveness', 'outlive-relay', 'outlive-cancels')"
        " GROUP BY application_name"
    )
)


async def _back(own: Sessions, workers: int) -> bool:
    """Each worker's liveness connection, relay LISTEN and cancels LISTEN came back by
    themselves, on the new primary (the one `own` reaches)."""
    try:
        rows = await own.all(SESSIONS)
    except ServiceUnavailable:
        return False
    return {r["name"]: r["n"] for r in rows} == {
        "outlive-liveness": workers,
        "outlive-relay": workers,
        "outlive-cancels": workers,
    }


async def _settled(own: Sessions, tenants: list[TenantHandle]) -> list[dict[str, Any]]:
    """Every run of the round's tenants, once none is active (the runs whose attempts the
    failover cut wait for their lease, 10 s)."""

    async def all_settled() -> list[dict[str, Any]] | None:
        try:
            rows = await own.all(RUNS, tenants=[t.id for t in tenants], gone=GONE)
        except ServiceUnavailable:
            return None  # the cluster is still switching
        if any(r["status"] in ("QUEUED", "RUNNING", "WAITING") for r in rows):
            return None
        return [dict(r) for r in rows]

    settled: list[dict[str, Any]] = await _until(all_settled, "every run settled", 240)
    return settled


def _figures(
    load: Load,
    runs: list[dict[str, Any]],
    *,
    fault: str,
    api_via: str,
    faulted: float,
    promoted: float,
) -> dict[str, Any]:
    bad = [a for a in load.answers if a.outcome != "ok"]
    last_bad = max((a.done for a in bad), default=faulted)
    normal = min(
        (a.done for a in load.answers if a.outcome == "ok" and a.done > last_bad),
        default=float("inf"),
    )
    first_ok = min(
        (a.done for a in load.answers if a.outcome == "ok" and a.sent > faulted),
        default=float("inf"),
    )
    took = [a.done - a.sent for a in load.answers]
    return {
        "fault": fault,
        "api_via": api_via,
        "answers": len(load.answers),
        "answered_503": sum(a.outcome == "503" for a in load.answers),
        "other": [a.outcome for a in bad if a.outcome != "503"][:5],
        "promoted_after_fault_s": round(promoted - faulted, 2),
        "first_success_after_fault_s": round(first_ok - faulted, 2),
        "normal_after_promotion_s": round(normal - promoted, 2),
        "slowest_answer_s": round(max(took), 2),
        "median_answer_s": round(statistics.median(took), 3),
        "acknowledged": len(load.acked),
        "runs_checked": len(runs),
        "lost_attempts": sum(r["lost_attempts"] for r in runs),
    }


def _check(load: Load, runs: list[dict[str, Any]], figures: dict[str, Any]) -> None:
    print(json.dumps(figures))  # noqa: T201 (the round's figures, with -s)
    if FIGURES:
        with Path(FIGURES).open("a") as out:
            out.write(json.dumps(figures) + "\n")
    assert figures["other"] == [], "an answer neither success nor 503 SERVICE_UNAVAILABLE"
    assert figures["normal_after_promotion_s"] <= NORMAL_WITHIN_S, figures
    by_id = {r["id"]: r for r in runs}
    assert set(load.acked) <= set(by_id), "an acknowledged startRun is not in the database"
    assert [r for r in runs if r["status"] != "SUCCEEDED"] == []  # 0 FAILED, 0 stranded
    assert [r for r in runs if r["settles"] != 1] == []  # settled exactly once
    assert [r for r in runs if (r["turns"], r["distinct_turns"]) != (10, 10)] == []
    assert sum(r["gone"] for r in runs) == 0, "a live worker's run was handed again"


@pytest.fixture(scope="module")
async def workers(
    cluster: PatroniCluster, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Settings, WorkerLogs]]:
    """Two real workers for the module, one on each path to the primary (the production lease:
    10 s, so that a live worker's runs are still under their lease when the relays come back)."""
    settings: Settings = make_settings(servers, database_url=cluster.hosts_url)
    logs, directory = WorkerLogs(), tmp_path_factory.mktemp("failover")
    try:
        for via in ("hosts", "haproxy"):
            on = settings.model_copy(update={"database_url": cluster.url(via=via)})
            start_worker(on, logs, directory, OUTLIVE_LOG_FORMAT="text")
        for path, _ in logs:
            await until_logged(path, "worker started")
        yield settings, logs
    finally:
        for process in logs.processes:
            stop(process)
        for _, log in logs:
            log.close()


async def test_the_primary_killed_under_load_loses_no_run_and_answers_503_at_worst(
    cluster: PatroniCluster, own: Sessions, workers: tuple[Settings, WorkerLogs]
) -> None:
    for n in range(ROUNDS):
        via = ("hosts", "haproxy")[n % 2]
        await one_round(cluster, own, *workers, fault="kill", api_via=via)


async def test_a_planned_switchover_answers_success_or_503_only(
    cluster: PatroniCluster, own: Sessions, workers: tuple[Settings, WorkerLogs]
) -> None:
    for n in range(ROUNDS):
        via = ("haproxy", "hosts")[n % 2]
        await one_round(cluster, own, *workers, fault="switchover", api_via=via)
