"""retryRun and replayRuns: a new run with the same input, linked to the old one; a bulk replay
that keeps its pace, its scope and its tenant, waits for an active run of an agent, and says how
far it got as it goes (nudging `replay.updated`)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.worker import WorkerHost
from tests.support import RUN_FIELDS, Api, GraphQLError, NudgeWatch, TenantHandle

pytestmark = pytest.mark.timeout(120)

RETRY = f"""mutation($id: ID!) {{
  retryRun(id: $id) {{ created run {{ {RUN_FIELDS} retriedFromId }} }} }}"""
REPLAY = """mutation($f: ReplayRunsFilter, $rate: Float, $limit: Int) {
  replayRuns(filter: $f, rate: $rate, limit: $limit) {
    id status total started skipped processed } }"""
STATE = """query($id: ID!) { runReplay(id: $id) { id status total started skipped processed
  waitingForRunId lastError statuses agent since rate createdAt finishedAt } }"""
CANCEL = "mutation($id: ID!) { cancelRunReplay(id: $id) { id status finishedAt } }"
LINKED = "{ runs(first: 100) { edges { node { id agent status input retriedFromId createdAt } } } }"


async def insert_runs(
    sessions: Sessions, tenant_id: uuid.UUID, rows: list[tuple[str, str, dict[str, Any], datetime]]
) -> list[str]:
    """Settled runs as history leaves them: (agent, status, input, created_at)."""
    ids = []
    async with sessions.unit() as uow:
        for agent, status, input, created in rows:
            found = await uow.session.execute(
                text(
                    "INSERT INTO runs (tenant_id, agent, status, input, created_at, finished_at)"
                    " VALUES (:t, :a, :s, CAST(:i AS jsonb), :c, :c) RETURNING id"
                ),
                {"t": tenant_id, "a": agent, "s": status, "i": json.dumps(input), "c": created},
            )
            ids.append(str(found.scalar_one()))
    return ids


async def linked_runs(api: Api, token: str) -> list[dict[str, Any]]:
    data = await api.gql(LINKED, token=token)
    return [e["node"] for e in data["runs"]["edges"] if e["node"]["retriedFromId"] is not None]


# --- retryRun --------------------------------------------------------------------------------


async def test_retry_run_starts_a_new_run_with_the_same_input_linked_to_the_first(
    api: Api, tenant: TenantHandle, settings: Settings, sessions: Sessions
) -> None:
    assert settings.redis_url is not None
    first = (await api.start_run(tenant.token, "demo", {"turns": 2, "delayMs": 5}))["run"]
    await api.cancel(tenant.token, first["id"])  # settled (no worker: it was QUEUED)
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        again = (await api.gql(RETRY, {"id": first["id"]}, token=tenant.token))["retryRun"]
        nudge = await watch.next_nudge(timeout=10)
    assert again["created"] is True
    run = again["run"]
    assert run["id"] != first["id"]
    assert run["retriedFromId"] == first["id"]
    assert (run["agent"], run["input"], run["status"]) == ("demo", first["input"], "QUEUED")
    assert nudge is not None
    assert (nudge["type"], nudge["id"]) == ("run.created", run["id"])
    assert (await api.run(tenant.token, first["id"]) or {})["status"] == "CANCELLED"  # untouched


async def test_retry_while_the_agent_has_an_active_run_hands_that_run_back(
    api: Api, tenant: TenantHandle
) -> None:
    old = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
    await api.cancel(tenant.token, old)
    active = (await api.start_run(tenant.token, "demo", {"turns": 7}))["run"]["id"]
    handed = (await api.gql(RETRY, {"id": old}, token=tenant.token))["retryRun"]
    assert handed["created"] is False  # one active run per agent, as startRun says
    assert handed["run"]["id"] == active
    itself = (await api.gql(RETRY, {"id": active}, token=tenant.token))["retryRun"]
    assert (itself["created"], itself["run"]["id"]) == (False, active)
    assert await linked_runs(api, tenant.token) == []  # nothing was inserted


async def test_retry_is_tenant_scoped_and_checks_its_input(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, sessions: Sessions
) -> None:
    theirs = (await api.start_run(other_tenant.token, "demo", {"turns": 1}))["run"]["id"]
    await api.cancel(other_tenant.token, theirs)
    with pytest.raises(GraphQLError) as caught:
        await api.gql(RETRY, {"id": theirs}, token=tenant.token)
    assert caught.value.codes == ["NOT_FOUND"]
    with pytest.raises(GraphQLError) as caught:
        await api.gql(RETRY, {"id": str(uuid.uuid4())}, token=tenant.token)
    assert caught.value.codes == ["NOT_FOUND"]  # another tenant's id reads like a random one
    with pytest.raises(GraphQLError) as caught:
        await api.gql(RETRY, {"id": "nope"}, token=tenant.token)
    assert caught.value.codes == ["BAD_USER_INPUT"]
    (stale,) = await insert_runs(
        sessions, tenant.id, [("demo", "FAILED", {"turns": 0}, datetime.now(UTC))]
    )
    with pytest.raises(GraphQLError) as caught:  # today's agent refuses that input
        await api.gql(RETRY, {"id": stale}, token=tenant.token)
    assert caught.value.codes == ["BAD_USER_INPUT"]
    assert await linked_runs(api, other_tenant.token) == []
    assert await linked_runs(api, tenant.token) == []


# --- replayRuns ------------------------------------------------------------------------------


async def test_a_replay_keeps_its_pace_scope_and_tenant_and_shows_its_progress(
    api: Api,
    worker: WorkerHost,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    settings: Settings,
    sessions: Sessions,
) -> None:
    assert settings.redis_url is not None
    now = datetime.now(UTC)
    since = now - timedelta(hours=1)
    chosen = await insert_runs(
        sessions,
        tenant.id,
        [
            (agent, "FAILED", input, since + timedelta(minutes=i))
            for i, (agent, input) in enumerate(
                [("demo", {"turns": 1, "delayMs": 0}), ("llm", {"prompt": "hi"})] * 3
            )
        ],
    )
    await insert_runs(
        sessions,
        tenant.id,
        [
            ("demo", "FAILED", {"turns": 1}, since - timedelta(minutes=1)),  # before `since`
            ("demo", "SUCCEEDED", {"turns": 1}, since + timedelta(minutes=30)),  # not FAILED
            ("llm", "CANCELLED", {"prompt": "x"}, since + timedelta(minutes=31)),
        ],
    )
    theirs = await insert_runs(
        sessions, other_tenant.id, [("demo", "FAILED", {"turns": 1}, since + timedelta(minutes=2))]
    )
    seen: list[dict[str, Any]] = []
    async with (
        NudgeWatch(settings.redis_url, sessions, tenant.id) as watch,
        NudgeWatch(settings.redis_url, sessions, other_tenant.id) as theirs_watch,
    ):
        replay = (
            await api.gql(
                REPLAY,
                {"f": {"status": ["FAILED"], "since": since.isoformat()}, "rate": 2},
                token=tenant.token,
            )
        )["replayRuns"]
        assert (replay["status"], replay["total"], replay["processed"]) == ("RUNNING", 6, 0)

        async def finished() -> dict[str, Any] | None:
            state = (await api.gql(STATE, {"id": replay["id"]}, token=tenant.token))["runReplay"]
            seen.append(state)
            return state if state["status"] == "DONE" else None

        done = await watch.until_true(finished, 60, "the replay done")
        while await watch.next_nudge(timeout=0.5) is not None:
            pass  # the last nudges, read after the state they announced
        assert await theirs_watch.next_nudge(timeout=0.5) is None  # nothing for the other tenant
    assert (done["started"], done["skipped"], done["processed"]) == (6, 0, 6)
    assert done["finishedAt"] is not None
    progress = [s["processed"] for s in seen]
    assert progress == sorted(progress)  # visible as it goes, never backwards
    assert any(0 < p < 6 for p in progress), progress
    replay_nudges = [n for n in watch.seen if n["type"] == "replay.updated"]
    assert len(replay_nudges) >= 4  # created, then one per tick (three ticks of two)

    replayed = await linked_runs(api, tenant.token)
    assert sorted(r["retriedFromId"] for r in replayed) == sorted(chosen)  # each once, no more
    assert await linked_runs(api, other_tenant.token) == []
    assert theirs  # their FAILED run was in range, and stayed theirs
    # the pace: never more than `rate` runs started within any second
    started = sorted(datetime.fromisoformat(r["createdAt"]) for r in replayed)
    for i, at in enumerate(started):
        assert sum(1 for t in started[i:] if t - at < timedelta(seconds=0.9)) <= 2, started
    assert started[-1] - started[0] >= timedelta(seconds=1.9)  # three ticks, a second apart


async def test_a_replay_waits_for_the_agents_active_run_and_skips_what_no_longer_validates(
    api: Api, worker: WorkerHost, tenant: TenantHandle, settings: Settings, sessions: Sessions
) -> None:
    assert settings.redis_url is not None
    past = datetime.now(UTC) - timedelta(minutes=10)
    await insert_runs(
        sessions,
        tenant.id,
        [
            ("demo", "FAILED", {"turns": 0}, past),  # invalid today: skipped
            ("demo", "FAILED", {"turns": 1, "delayMs": 0}, past + timedelta(seconds=1)),
            ("demo", "FAILED", {"turns": 1, "delayMs": 0}, past + timedelta(seconds=2)),
        ],
    )
    blocker = (await api.start_run(tenant.token, "demo", {"turns": 1000, "delayMs": 600_000}))[
        "run"
    ]["id"]
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        replay = (await api.gql(REPLAY, {"rate": 5}, token=tenant.token))["replayRuns"]
        assert replay["total"] == 3

        async def waiting() -> dict[str, Any] | None:
            state = (await api.gql(STATE, {"id": replay["id"]}, token=tenant.token))["runReplay"]
            return state if state["waitingForRunId"] is not None else None

        state = await watch.until_true(waiting, 30, "the replay waiting")
        assert state["waitingForRunId"] == blocker
        assert (state["status"], state["started"], state["skipped"]) == ("RUNNING", 0, 1)
        assert "no longer" in state["lastError"] or "turns" in state["lastError"]
        await api.cancel(tenant.token, blocker)

        async def finished() -> dict[str, Any] | None:
            state = (await api.gql(STATE, {"id": replay["id"]}, token=tenant.token))["runReplay"]
            return state if state["status"] == "DONE" else None

        done = await watch.until_true(finished, 60, "the replay done")
    assert (done["started"], done["skipped"], done["waitingForRunId"]) == (2, 1, None)


async def test_replays_are_bounded_tenant_scoped_and_cancellable(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, sessions: Sessions
) -> None:
    await insert_runs(
        sessions,
        tenant.id,
        [
            ("llm", "FAILED", {"prompt": "p"}, datetime.now(UTC) - timedelta(minutes=i))
            for i in (1, 2)
        ],
    )
    for variables, fragment in (
        ({"rate": 0}, "rate"),
        ({"rate": 1000}, "rate"),
        ({"limit": 0}, "limit"),
        ({"limit": 100_000}, "limit"),
        ({"f": {"status": ["QUEUED"]}}, "settled"),
    ):
        with pytest.raises(GraphQLError, match=fragment) as caught:
            await api.gql(REPLAY, variables, token=tenant.token)
        assert caught.value.codes == ["BAD_USER_INPUT"]
    replay = (await api.gql(REPLAY, {"f": {"agent": "llm"}, "limit": 1}, token=tenant.token))[
        "replayRuns"
    ]
    assert (replay["status"], replay["total"]) == ("RUNNING", 1)  # no worker: it stays there
    with pytest.raises(GraphQLError, match="still running") as caught:
        await api.gql(REPLAY, {}, token=tenant.token)
    assert caught.value.codes == ["BAD_USER_INPUT"]

    # another tenant: null where it is read, NOT_FOUND where it is written, absent from lists
    other = await api.gql(STATE, {"id": replay["id"]}, token=other_tenant.token)
    assert other["runReplay"] is None
    with pytest.raises(GraphQLError) as caught:
        await api.gql(CANCEL, {"id": replay["id"]}, token=other_tenant.token)
    assert caught.value.codes == ["NOT_FOUND"]
    listed = await api.gql("{ runReplays { id } }", token=other_tenant.token)
    assert listed["runReplays"] == []
    empty = (await api.gql(REPLAY, {}, token=other_tenant.token))["replayRuns"]
    assert (empty["status"], empty["total"]) == ("DONE", 0)  # nothing of theirs matched

    cancelled = (await api.gql(CANCEL, {"id": replay["id"]}, token=tenant.token))["cancelRunReplay"]
    assert cancelled["status"] == "CANCELLED"
    again = (await api.gql(CANCEL, {"id": replay["id"]}, token=tenant.token))["cancelRunReplay"]
    assert again == cancelled  # idempotent
    mine = await api.gql("{ runReplays { id status } }", token=tenant.token)
    assert mine["runReplays"] == [{"id": replay["id"], "status": "CANCELLED"}]
