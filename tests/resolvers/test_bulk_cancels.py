"""cancelRuns and cancelRunsCount: the active runs a filter selects, counted first, then cancelled
in the background as cancelRun cancels each (who asked and why on its timeline), with a
replay's progress, nudges and Stop; nothing of another tenant's, nothing settled, nothing that
does not match, nothing past a Stop; a repeat finds nothing left to do."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.models import Role
from outlive.db.tx import Sessions
from outlive.services.tenants import create_token
from outlive.worker import WorkerHost
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle

pytestmark = pytest.mark.timeout(120)

COUNT = (
    """query($f: CancelRunsFilter, $limit: Int) { cancelRunsCount(filter: $f, limit: $limit) }"""
)
CANCEL_RUNS = """mutation($f: CancelRunsFilter, $reason: String, $rate: Float, $limit: Int) {
  cancelRuns(filter: $f, reason: $reason, rate: $rate, limit: $limit) {
    id kind status total cancelled skipped processed reason requestedBy tags key } }"""
STATE = """query($id: ID!) { runReplay(id: $id) { id kind status total cancelled skipped
  processed started finishedAt } }"""
STOP = "mutation($id: ID!) { cancelRunReplay(id: $id) { id status cancelled processed } }"


async def insert_waiting(
    sessions: Sessions,
    tenant_id: uuid.UUID,
    rows: list[tuple[str, str, list[str], datetime]],
    *,
    status: str = "WAITING",
) -> list[str]:
    """Active runs parked on a signal (no worker holds them): (agent, key, tags, created_at)."""
    ids = []
    async with sessions.unit() as uow:
        for agent, key, tags, created in rows:
            found = await uow.session.execute(
                text(
                    "INSERT INTO runs (tenant_id, agent, status, input, key, tags, created_at,"
                    " waiting_for, finished_at)"
                    " VALUES (:t, :a, CAST(:s AS text), CAST(:i AS jsonb), :k, :tags,"
                    " CAST(:c AS timestamptz), 'approval',"
                    " CASE WHEN CAST(:s AS text) = 'WAITING' THEN NULL"
                    " ELSE CAST(:c AS timestamptz) END)"
                    " RETURNING id"
                ),
                {
                    "t": tenant_id,
                    "a": agent,
                    "s": status,
                    "i": json.dumps({"turns": 1}),
                    "k": key,
                    "tags": tags,
                    "c": created,
                },
            )
            ids.append(str(found.scalar_one()))
    return ids


async def statuses(sessions: Sessions, ids: list[str]) -> dict[str, str]:
    async with sessions.unit() as uow:
        rows = await uow.session.execute(
            text("SELECT id, status FROM runs WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": ids},
        )
        return {str(r.id): r.status for r in rows}


async def cancel_events(sessions: Sessions, run_id: str) -> list[dict[str, Any]]:
    async with sessions.unit() as uow:
        rows = await uow.session.execute(
            text(
                "SELECT type, data FROM run_events WHERE run_id = CAST(:r AS uuid)"
                " AND type IN ('cancelled', 'cancel_requested') ORDER BY seq"
            ),
            {"r": run_id},
        )
        return [{"type": r.type, **r.data} for r in rows]


async def token_of(sessions: Sessions, tenant: TenantHandle, role: Role) -> str:
    async with sessions.unit() as uow:
        _, token = await create_token(
            uow,
            tenant_slug=tenant.principal.tenant.slug,
            email=f"{role.value.lower()}-{uuid.uuid4().hex[:6]}@bulk.test",
            role=role,
        )
    return token


async def test_the_count_then_exactly_the_matching_active_runs_are_cancelled_as_cancel_run_does(
    api: Api,
    worker: WorkerHost,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    settings: Settings,
    sessions: Sessions,
) -> None:
    assert settings.redis_url is not None
    old = datetime.now(UTC) - timedelta(hours=1)
    bad = ["deploy:42"]
    chosen = await insert_waiting(
        sessions, tenant.id, [("demo", f"k{i}", bad, old + timedelta(minutes=i)) for i in range(5)]
    )
    # a live one, RUNNING on a worker: asked to stop, it stops itself (cooperative cancel)
    live = (
        await api.gql(
            """mutation { startRun(input: {agent: "demo", key: "live", tags: ["deploy:42"],
               input: {turns: 1000, delayMs: 1000}}) { run { id } } }""",
            token=tenant.token,
        )
    )["startRun"]["run"]["id"]
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        await watch.until(live, lambda r: r.status.value == "RUNNING")
    left_alone = await insert_waiting(
        sessions,
        tenant.id,
        [
            ("demo", "other-tag", ["deploy:41"], old),  # another tag
            ("llm", "other-agent", bad, old),  # another agent
            ("demo", "too-old", bad, old - timedelta(days=2)),  # before `since`
        ],
    )
    settled = await insert_waiting(
        sessions, tenant.id, [("demo", "done", bad, old)], status="FAILED"
    )
    theirs = await insert_waiting(sessions, other_tenant.id, [("demo", "k0", bad, old)])
    f = {"agent": "demo", "tags": bad, "since": (old - timedelta(days=1)).isoformat()}

    counted = (await api.gql(COUNT, {"f": f}, token=tenant.token))["cancelRunsCount"]
    assert counted == 6  # five parked, one running; not the settled, nor the others
    assert (await api.gql(COUNT, {"f": f, "limit": 2}, token=tenant.token))["cancelRunsCount"] == 2
    assert (await api.gql(COUNT, {"f": f}, token=other_tenant.token))["cancelRunsCount"] == 1
    assert (await api.gql(COUNT, {"f": {"status": ["RUNNING"]}}, token=tenant.token))[
        "cancelRunsCount"
    ] == 1

    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        made = (await api.gql(CANCEL_RUNS, {"f": f, "reason": "bad deploy"}, token=tenant.token))[
            "cancelRuns"
        ]
        assert (made["kind"], made["status"], made["total"]) == ("CANCEL", "RUNNING", counted)
        assert (made["reason"], made["requestedBy"], made["tags"]) == (
            "bad deploy",
            tenant.principal.user.email,
            bad,
        )

        async def finished() -> dict[str, Any] | None:
            state = (await api.gql(STATE, {"id": made["id"]}, token=tenant.token))["runReplay"]
            return state if state["status"] == "DONE" else None

        done = await watch.until_true(finished, 60, "the bulk cancel done")
        assert any(n["type"] == "replay.updated" and n["id"] == made["id"] for n in watch.seen)
        await watch.until(live, lambda r: r.status.value == "CANCELLED")
    assert (done["cancelled"], done["skipped"], done["processed"], done["started"]) == (6, 0, 6, 0)

    after = await statuses(sessions, [*chosen, live, *left_alone, *settled, *theirs])
    assert {after[i] for i in [*chosen, live]} == {"CANCELLED"}
    assert [after[i] for i in left_alone] == ["WAITING"] * 3
    assert after[settled[0]] == "FAILED"
    assert after[theirs[0]] == "WAITING"  # another tenant's run, in range, untouched
    by = {"by": tenant.principal.user.email, "reason": "bad deploy"}
    assert await cancel_events(sessions, chosen[0]) == [{"type": "cancelled", **by}]
    assert (await cancel_events(sessions, live))[0] == {"type": "cancel_requested", **by}

    # a repeat finds nothing left: done at once, nothing changed
    again = (await api.gql(CANCEL_RUNS, {"f": f}, token=tenant.token))["cancelRuns"]
    assert (again["status"], again["total"], again["processed"]) == ("DONE", 0, 0)
    assert await statuses(sessions, [*chosen, live, *left_alone, *settled, *theirs]) == after
    listed = await api.gql("{ runReplays { id kind } }", token=tenant.token)
    assert listed["runReplays"] == [
        {"id": again["id"], "kind": "CANCEL"},
        {"id": made["id"], "kind": "CANCEL"},
    ]


async def test_stop_mid_way_leaves_the_runs_it_had_not_reached_untouched(
    api: Api, worker: WorkerHost, tenant: TenantHandle, settings: Settings, sessions: Sessions
) -> None:
    assert settings.redis_url is not None
    old = datetime.now(UTC) - timedelta(hours=1)
    runs = await insert_waiting(
        sessions, tenant.id, [("demo", f"k{i}", [], old + timedelta(seconds=i)) for i in range(6)]
    )
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        made = (await api.gql(CANCEL_RUNS, {"rate": 1}, token=tenant.token))["cancelRuns"]
        assert made["total"] == 6

        async def under_way() -> dict[str, Any] | None:
            state = (await api.gql(STATE, {"id": made["id"]}, token=tenant.token))["runReplay"]
            return state if state["cancelled"] >= 1 else None

        await watch.until_true(under_way, 30, "the first run cancelled")
        stopped = (await api.gql(STOP, {"id": made["id"]}, token=tenant.token))["cancelRunReplay"]
    assert stopped["status"] == "CANCELLED"
    assert 1 <= stopped["cancelled"] < 6  # one a second: stopped well before the sixth
    # oldest first: exactly the first `cancelled` runs, the rest still waiting
    reached = stopped["cancelled"]
    now = await statuses(sessions, runs)
    assert [now[r] for r in runs] == ["CANCELLED"] * reached + ["WAITING"] * (6 - reached)
    # the tick that was due finds it stopped: a second later, still nothing more
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        assert await watch.next_nudge(timeout=2.5) is None
    assert await statuses(sessions, runs) == now
    state = (await api.gql(STATE, {"id": made["id"]}, token=tenant.token))["runReplay"]
    assert (state["status"], state["cancelled"]) == ("CANCELLED", reached)


async def test_bad_input_and_a_viewer_are_refused_and_change_nothing(
    api: Api,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    sessions: Sessions,
) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    runs = await insert_waiting(sessions, tenant.id, [("demo", "k", [], old)])
    now = datetime.now(UTC)
    for variables, fragment in (
        ({"f": {"status": ["FAILED"]}}, "active"),
        ({"rate": 0}, "rate"),
        ({"rate": 1000}, "rate"),
        ({"limit": 0}, "limit"),
        ({"limit": 100_000}, "limit"),
        ({"reason": "x" * 501}, "reason"),
        ({"f": {"tags": [f"t{i}" for i in range(11)]}}, "tags"),
        ({"f": {"since": now.isoformat(), "before": old.isoformat()}}, "before"),
    ):
        with pytest.raises(GraphQLError, match=fragment) as caught:
            await api.gql(CANCEL_RUNS, variables, token=tenant.token)
        assert caught.value.codes == ["BAD_USER_INPUT"]
    with pytest.raises(GraphQLError, match="active") as caught:
        await api.gql(COUNT, {"f": {"status": ["SUCCEEDED"]}}, token=tenant.token)
    assert caught.value.codes == ["BAD_USER_INPUT"]

    viewer = await token_of(sessions, tenant, Role.VIEWER)
    assert (await api.gql(COUNT, token=viewer))["cancelRunsCount"] == 1  # a VIEWER may count
    with pytest.raises(GraphQLError) as caught:
        await api.gql(CANCEL_RUNS, token=viewer)
    assert caught.value.codes == ["FORBIDDEN"]
    assert (await api.gql("{ runReplays { id } }", token=tenant.token))["runReplays"] == []
    assert await statuses(sessions, runs) == {runs[0]: "WAITING"}

    # an OPERATOR may; no worker here, so it stays RUNNING: one at a time per tenant and kind
    operator = await token_of(sessions, tenant, Role.OPERATOR)
    made = (await api.gql(CANCEL_RUNS, token=operator))["cancelRuns"]
    assert (made["status"], made["total"]) == ("RUNNING", 1)
    with pytest.raises(GraphQLError, match="still running") as caught:
        await api.gql(CANCEL_RUNS, token=tenant.token)
    assert caught.value.codes == ["BAD_USER_INPUT"]
    replay = await api.gql(
        "mutation { replayRuns { id status } }", token=tenant.token
    )  # a replay may run beside it
    assert replay["replayRuns"]["status"] == "DONE"  # (nothing FAILED to replay)
    # another tenant: null where it is read, NOT_FOUND where it is stopped
    assert (await api.gql(STATE, {"id": made["id"]}, token=other_tenant.token))["runReplay"] is None
    with pytest.raises(GraphQLError) as caught:
        await api.gql(STOP, {"id": made["id"]}, token=other_tenant.token)
    assert caught.value.codes == ["NOT_FOUND"]
    stopped = (await api.gql(STOP, {"id": made["id"]}, token=operator))["cancelRunReplay"]
    assert (stopped["status"], stopped["cancelled"]) == ("CANCELLED", 0)
    assert await statuses(sessions, runs) == {runs[0]: "WAITING"}  # stopped before its tick
