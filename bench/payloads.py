"""Benchmark: large payloads stored once, read in ranges by many clients (issue 46).

    uv run python bench/payloads.py [--results 50] [--unique 50] [--mib 2] [--clients 20]

A fresh database gets one run whose `--results` steps each returned `--mib` MiB of
incompressible JSON (`--unique` of them distinct), stored through `services.blobs` as a worker
stores them. Then an `outlive api` process serves `--clients` concurrent clients, each reading
every blob whole through `payload(runId, ref, offset, length)` in 1 MiB ranges (after one
`run { steps { result } }` answer, the references). Reported: the database's growth against the
unique bytes, the API process's RSS before and at its highest while they read (sampled from
/proc every 50 ms), and the read throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import KeepAlive, bench_env, free_port, outlive, wait_http
from runs import make_tenants

from outlive.db.engine import create_engine, create_sessions
from outlive.services import blobs

STEPS = "query($id: ID!) { run(id: $id) { steps(first: 1000) { result } } }"
PAYLOAD = """query($id: ID!, $ref: String!, $offset: Int!) {
    payload(runId: $id, ref: $ref, offset: $offset) { size base64 } }"""
SIZES = (
    "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['blobs', 'blob_parts',"
    " 'blob_refs', 'run_steps', 'runs']::regclass[]) c"
)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def ask(
    client: KeepAlive, token: str, query: str, variables: dict[str, object]
) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables}).encode()
    status, payload = await client.post_json("/graphql", body, {"Authorization": f"Bearer {token}"})
    answer = json.loads(payload)
    if status != 200 or answer.get("errors"):
        raise RuntimeError(f"{status}: {payload[:300]!r}")
    return dict(answer["data"])


async def reader(port: int, token: str, run_id: str, refs: list[dict[str, object]]) -> int:
    client, read = KeepAlive("127.0.0.1", port), 0
    for ref in refs:
        got = b""
        while len(got) < int(str(ref["size"])):
            variables = {"id": run_id, "ref": ref["$blob"], "offset": len(got)}
            part = (await ask(client, token, PAYLOAD, variables))["payload"]
            got += base64.b64decode(part["base64"])
        if hashlib.sha256(got).hexdigest() != ref["$blob"]:
            raise RuntimeError("a payload came back changed")
        read += len(got)
    await client.close()
    return read


async def seed(url: str, tenant_id: uuid.UUID, args: argparse.Namespace) -> tuple[str, int]:
    conn = await asyncpg.connect(url)
    run_id = await conn.fetchval(
        "INSERT INTO runs (tenant_id, agent, status, input, finished_at)"
        " VALUES ($1, 'demo', 'SUCCEEDED', '{}', now()) RETURNING id",
        tenant_id,
    )
    before = await conn.fetchval(SIZES)
    sessions = create_sessions(create_engine(url))
    values = [
        json.dumps(base64.b64encode(os.urandom(args.mib * 768 * 1024)).decode())
        for _ in range(args.unique)
    ]
    for i in range(args.results):
        ref = await blobs.store_text(sessions, tenant_id, run_id, values[i % args.unique])
        await conn.execute(
            "INSERT INTO run_steps (run_id, name, occurrence, seq, attempt, result)"
            " VALUES ($1, 'tool', $2, $2, 1, $3::jsonb)",
            run_id,
            i + 1,
            ref,
        )
    grew = await conn.fetchval(SIZES) - before
    await conn.close()
    unique = sum(len(v.encode()) for v in values)
    print(f"database grew {grew} bytes for {unique} unique: {grew / unique:.3f}x")
    return str(run_id), unique


async def main(args: argparse.Namespace) -> None:
    async with bench_env() as env:
        conn = await asyncpg.connect(env.database_url)
        ((tenant_id, token),) = await make_tenants(conn, 1)
        await conn.close()
        run_id, _ = await seed(env.database_url, tenant_id, args)
        port = free_port()
        log = Path(os.environ.get("BENCH_API_LOG", os.devnull))
        with outlive("api", "--port", str(port), env=env.vars(), log=log) as api:
            await wait_http(f"http://127.0.0.1:{port}/healthz", timeout=300)
            client = KeepAlive("127.0.0.1", port)
            answer = await ask(client, token, STEPS, {"id": run_id})
            refs = [s["result"] for s in answer["run"]["steps"]]
            unique_refs = list({r["$blob"]: r for r in refs}.values())
            await reader(port, token, run_id, unique_refs[:1])  # warm
            idle, peak, stop = rss_kib(api.pid), 0, asyncio.Event()

            async def sample() -> None:
                nonlocal peak
                while not stop.is_set():
                    peak = max(peak, rss_kib(api.pid))
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            began = time.perf_counter()
            read = sum(
                await asyncio.gather(
                    *(reader(port, token, run_id, unique_refs) for _ in range(args.clients))
                )
            )
            took = time.perf_counter() - began
            stop.set()
            await sampler
            await client.close()
        print(
            f"{args.clients} clients read {read / 2**20:.0f} MiB in {took:.1f}s"
            f" ({read / 2**20 / took:.0f} MiB/s); API RSS {idle // 1024} MiB idle,"
            f" {peak // 1024} MiB at most (+{(peak - idle) // 1024} MiB)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=50)
    parser.add_argument("--unique", type=int, default=50)
    parser.add_argument("--mib", type=int, default=2)
    parser.add_argument("--clients", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
