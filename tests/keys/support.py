"""Helpers of the key tests: `startRun` with the round-four options, and raw reads of runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from outlive.db.tx import Sessions
from tests.support import Api

KEY_FIELDS = """id agent status input output error createdAt startedAt finishedAt
cancelRequestedAt key tags queuedBehindId waitingReason"""


async def start(
    api: Api,
    token: str,
    input: dict[str, Any] | None = None,
    *,
    agent: str = "demo",
    **options: Any,
) -> dict[str, Any]:
    """`startRun` with `options` (key, onConflict, tags, idempotencyKey) beside agent and input."""
    data = await api.gql(
        f"""mutation($input: StartRunInput!) {{
              startRun(input: $input) {{ created run {{ {KEY_FIELDS} }} }} }}""",
        {"input": {"agent": agent, "input": input, **options}},
        token=token,
    )
    started: dict[str, Any] = data["startRun"]
    return started


async def read(api: Api, token: str, run_id: str) -> dict[str, Any]:
    data = await api.gql(
        f"query($id: ID!) {{ run(id: $id) {{ {KEY_FIELDS} }} }}", {"id": run_id}, token=token
    )
    run: dict[str, Any] = data["run"]
    return run


async def rows(sessions: Sessions, sql: str, **params: Any) -> list[dict[str, Any]]:
    found = await sessions.all(text(sql), **params)
    return [dict(r) for r in found]
