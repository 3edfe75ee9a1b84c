"""Schedules through GraphQL: their life (create, update, pause, resume, delete), the checks that
refuse a bad one, the tenant's limits, trigger and backfill, and `runs(scheduleId:)`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.schedules.support import (
    BACKFILL,
    DELETE,
    LIST,
    ONE,
    PAUSE,
    RESUME,
    RUNS,
    TRIGGER,
    UPDATE,
    create,
    rows,
)
from tests.support import Api, GraphQLError, NudgeWatch, Servers, TenantHandle


async def test_a_schedule_s_life_through_graphql(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, sessions: Sessions, settings: object
) -> None:
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:  # type: ignore[attr-defined]
        made = await create(
            api, tenant.token, cron="0 8 * * 1-5", timezone="Europe/Paris", input={"turns": 1}
        )
        nudge = await watch.saw("schedule.updated")
    assert nudge["id"] == made["id"]
    assert made["key"] == f"schedule:{made['id']}"
    assert (made["onConflict"], made["paused"], made["catchupWindowSeconds"]) == (
        "REJECT",
        False,
        300,
    )
    fire = datetime.fromisoformat(made["nextFireAt"])
    wall = fire.astimezone(ZoneInfo("Europe/Paris"))
    assert (wall.hour, wall.minute, wall.weekday() < 5) == (8, 0, True)
    assert fire > datetime.now(UTC)

    paused = (await api.gql(PAUSE, {"id": made["id"]}, token=tenant.token))["pauseSchedule"]
    assert (paused["paused"], paused["nextFireAt"]) == (True, None)
    changed = (
        await api.gql(
            UPDATE,
            {"id": made["id"], "i": {"agent": "demo", "cron": "@daily", "onConflict": "ENQUEUE"}},
            token=tenant.token,
        )
    )["updateSchedule"]
    assert (changed["cron"], changed["onConflict"], changed["paused"]) == (
        "@daily",
        "ENQUEUE",
        True,
    )
    resumed = (await api.gql(RESUME, {"id": made["id"]}, token=tenant.token))["resumeSchedule"]
    assert resumed["paused"] is False
    assert datetime.fromisoformat(resumed["nextFireAt"]).astimezone(UTC).hour == 0

    # another tenant sees none of it
    assert (await api.gql(ONE, {"id": made["id"]}, token=other_tenant.token))["schedule"] is None
    with pytest.raises(GraphQLError) as missing:
        await api.gql(PAUSE, {"id": made["id"]}, token=other_tenant.token)
    assert missing.value.codes == ["NOT_FOUND"]
    assert (await api.gql(DELETE, {"id": made["id"]}, token=other_tenant.token)) == {
        "deleteSchedule": False
    }

    second = await create(api, tenant.token)
    third = await create(api, tenant.token)
    page = (await api.gql(LIST, {}, token=tenant.token))["schedules"]
    assert [s["id"] for s in page] == [made["id"], second["id"]]
    rest = (await api.gql(LIST, {"after": second["id"]}, token=tenant.token))["schedules"]
    assert [s["id"] for s in rest] == [third["id"]]
    assert (await api.gql(DELETE, {"id": made["id"]}, token=tenant.token)) == {
        "deleteSchedule": True
    }
    assert (await api.gql(ONE, {"id": made["id"]}, token=tenant.token))["schedule"] is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cron": "61 * * * *"}, "cron '61 * * * *'"),
        ({"cron": "* * * *"}, "expected 5 fields"),
        ({"cron": "0 0 L * *"}, "L and # are not supported"),
        ({"timezone": "Mars/Olympus"}, "IANA"),
        ({"jitterSeconds": -1}, "jitterSeconds"),
        ({"catchupWindowSeconds": 10**9}, "catchupWindowSeconds"),
        ({"agent": "nope"}, "nope"),
        ({"key": ""}, "key"),
    ],
)
async def test_a_bad_schedule_is_refused_and_nothing_is_written(
    api: Api, tenant: TenantHandle, sessions: Sessions, fields: dict[str, object], says: str
) -> None:
    with pytest.raises(GraphQLError) as bad:
        await create(api, tenant.token, **fields)
    (error,) = bad.value.errors
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert says in error["message"]
    found = await rows(
        sessions, "SELECT count(*) AS n FROM schedules WHERE tenant_id = :t", t=tenant.id
    )
    assert found[0]["n"] == 0


async def test_a_tenant_s_cap_and_the_interval_floor(
    servers: Servers, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, tenant_max_schedules=2, schedule_min_interval_s=300)
    async with Api.running(settings) as api:
        with pytest.raises(GraphQLError) as fast:
            await create(api, tenant.token, cron="*/2 * * * *")
        assert "every 120 s" in fast.value.errors[0]["message"]
        assert "OUTLIVE_SCHEDULE_MIN_INTERVAL_S" in fast.value.errors[0]["message"]
        await create(api, tenant.token, cron="*/5 * * * *")
        await create(api, tenant.token)
        with pytest.raises(GraphQLError) as full:
            await create(api, tenant.token)
        assert full.value.codes == ["BAD_USER_INPUT"]
        assert "OUTLIVE_TENANT_MAX_SCHEDULES" in full.value.errors[0]["message"]


async def test_backfill_of_a_day_of_an_hourly_schedule_makes_24_runs_and_a_repeat_none(
    api: Api, tenant: TenantHandle
) -> None:
    made = await create(api, tenant.token, input={"turns": 1}, onConflict="REJECT")
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    span = {"id": made["id"], "f": (today - timedelta(days=1)).isoformat(), "t": today.isoformat()}
    assert (await api.gql(BACKFILL, span, token=tenant.token)) == {"backfillSchedule": 24}
    assert (await api.gql(BACKFILL, span, token=tenant.token)) == {"backfillSchedule": 0}
    wider = {**span, "f": (today - timedelta(days=1, hours=2)).isoformat()}
    assert (await api.gql(BACKFILL, wider, token=tenant.token)) == {"backfillSchedule": 2}
    found = (await api.gql(RUNS, {"s": made["id"]}, token=tenant.token))["runs"]
    assert found["totalCount"] == 26
    times = sorted(datetime.fromisoformat(e["node"]["scheduledFor"]) for e in found["edges"])
    assert times[0] == today - timedelta(days=1, hours=2)
    assert times[-1] == today - timedelta(hours=1)
    assert len(set(times)) == 26
    assert {e["node"]["key"] for e in found["edges"]} == {made["key"]}
    assert all(e["node"]["input"]["turns"] == 1 for e in found["edges"])
    with pytest.raises(GraphQLError) as long:
        await api.gql(
            BACKFILL, {**span, "f": (today - timedelta(days=60)).isoformat()}, token=tenant.token
        )
    assert "at most 1000" in long.value.errors[0]["message"]


async def test_trigger_starts_one_run_now_under_the_overlap_policy(
    api: Api, tenant: TenantHandle
) -> None:
    rejecting = await create(api, tenant.token, input={"turns": 1, "delayMs": 60_000})
    first = (await api.gql(TRIGGER, {"id": rejecting["id"]}, token=tenant.token))["triggerSchedule"]
    assert first["created"] is True
    assert (first["run"]["scheduleId"], first["run"]["key"]) == (rejecting["id"], rejecting["key"])
    assert first["run"]["scheduledFor"] is not None
    with pytest.raises(GraphQLError) as busy:
        await api.gql(TRIGGER, {"id": rejecting["id"]}, token=tenant.token)
    assert busy.value.codes == ["RUN_ACTIVE"]
    returning = await create(api, tenant.token, onConflict="RETURN_EXISTING")
    a = (await api.gql(TRIGGER, {"id": returning["id"]}, token=tenant.token))["triggerSchedule"]
    b = (await api.gql(TRIGGER, {"id": returning["id"]}, token=tenant.token))["triggerSchedule"]
    assert (a["created"], b["created"], b["run"]["id"]) == (True, False, a["run"]["id"])
    queueing = await create(api, tenant.token, onConflict="ENQUEUE")
    for _ in range(3):
        await api.gql(TRIGGER, {"id": queueing["id"]}, token=tenant.token)
    found = (await api.gql(RUNS, {"s": queueing["id"]}, token=tenant.token))["runs"]
    assert found["totalCount"] == 3
