"""Debounce under chaos (issue 44): bursts of debounced starts on several keys, and in each
round a worker SIGKILLed as the held runs are let in and run. Every start is answered with a
run; every run settles SUCCEEDED (none lost with the worker that held it); each ran with the
input of the last start answered with it (a later start never edits a run that began); none
began before its notBefore.

Sized for CI (2 workers, 4 keys, 2 rounds of 3 starts a key: about a minute; 96 s with 3
rounds on a loaded machine); `OUTLIVE_DEBOUNCE_CHAOS_KEYS` and
`OUTLIVE_DEBOUNCE_CHAOS_ROUNDS` make it larger."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.chaos.stage import staged, until

pytestmark = pytest.mark.timeout(600)

KEYS = int(os.environ.get("OUTLIVE_DEBOUNCE_CHAOS_KEYS", "4"))
ROUNDS = int(os.environ.get("OUTLIVE_DEBOUNCE_CHAOS_ROUNDS", "2"))
PER_BURST = 3
KILL_AFTER_S = 2.5  # after a round's bursts
DEBOUNCE = {"seconds": 2.0, "maxSeconds": 30.0}
START = """mutation($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"""


async def test_debounced_runs_run_once_with_their_last_input_through_worker_kills(
    tmp_path: Path,
) -> None:
    async with staged(
        tmp_path, workers=2, tenants=["d"], env={"OUTLIVE_RELAY_SCAN_S": "1"}
    ) as stage:
        fleet, postgres, token = stage.fleet, stage.postgres, stage.tokens[0]
        answered: list[tuple[str, int]] = []  # (run id, the input's index), in answer order

        async def burst(key: str, base: int) -> None:
            for n in range(PER_BURST):
                body: Any = await stage.gql(
                    token,
                    START,
                    {
                        "i": {
                            "agent": "demo",
                            "key": key,
                            "debounce": DEBOUNCE,
                            "input": {"turns": 1, "delayMs": 1500, "childIndex": base + n},
                        }
                    },
                )
                answered.append((body["startRun"]["run"]["id"], base + n))

        async def settled() -> bool:
            c = await asyncpg.connect(postgres.url)
            try:
                active = await c.fetchval(
                    "SELECT count(*) FROM runs WHERE status IN ('QUEUED', 'RUNNING', 'WAITING')"
                )
            finally:
                await c.close()
            return bool(active == 0)

        rng = random.Random(44)
        for r in range(ROUNDS):
            keys = [f"user:{k}" for k in range(KEYS)]
            await asyncio.gather(*(burst(k, 1000 * r + 100 * i) for i, k in enumerate(keys)))
            # The holds end 2 s after the last starts and the runs take 1.5 s: a worker dies
            # while some are held, dispatched or running.
            await asyncio.sleep(KILL_AFTER_S)
            assert await fleet.kill_a_worker(rng)
            await until(f"round {r} settled", settled, timeout=180)
        await fleet.replaced()
        conn = await asyncpg.connect(postgres.url)
        found = await conn.fetch("SELECT id, status, input, not_before, started_at FROM runs")
        await conn.close()
    last: dict[str, int] = {}
    for run_id, index in answered:
        last[run_id] = index
    assert {str(r["id"]) for r in found} == set(last)  # every start answered by a run kept
    for r in found:
        assert r["status"] == "SUCCEEDED", r  # none lost with a killed worker
        assert json.loads(r["input"])["childIndex"] == last[str(r["id"])], (
            r
        )  # its last start's input
        assert r["started_at"] >= r["not_before"], r  # held until its notBefore
    assert len(found) < len(answered)  # the starts were merged
    assert len(fleet.worker_kills) == ROUNDS
