"""replayRunsCount: how many runs a bulk replay would take, before it is asked for; the replay
then takes that many. Checked as replayRuns checks, and scoped to the tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outlive.db.tx import Sessions
from tests.resolvers.test_replays import REPLAY, insert_runs
from tests.support import Api, GraphQLError, TenantHandle

pytestmark = pytest.mark.timeout(60)

COUNT = (
    """query($f: ReplayRunsFilter, $limit: Int) { replayRunsCount(filter: $f, limit: $limit) }"""
)


async def test_the_count_before_a_replay_is_what_the_replay_takes(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, sessions: Sessions
) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    await insert_runs(
        sessions,
        tenant.id,
        [
            ("demo", "FAILED", {"turns": 1}, old),
            ("demo", "FAILED", {"turns": 1}, old),
            ("demo", "CANCELLED", {"turns": 1}, old),
            ("other", "FAILED", {"turns": 1}, old),
            ("demo", "SUCCEEDED", {"turns": 1}, old),
        ],
    )
    await insert_runs(sessions, other_tenant.id, [("demo", "FAILED", {"turns": 1}, old)])

    async def count(f: dict[str, object] | None, limit: int | None = None, token: str = "") -> int:
        data = await api.gql(COUNT, {"f": f, "limit": limit}, token=token or tenant.token)
        return int(data["replayRunsCount"])

    assert await count(None) == 3  # FAILED by default, any agent
    assert await count({"agent": "demo"}) == 2
    assert await count({"status": ["FAILED", "CANCELLED"], "agent": "demo"}) == 3
    assert await count({"status": ["FAILED", "CANCELLED"]}, limit=2) == 2
    assert await count({"since": datetime.now(UTC).isoformat()}) == 0
    assert await count(None, token=other_tenant.token) == 1  # its own run only
    with pytest.raises(GraphQLError) as caught:
        await count({"status": ["RUNNING"]})
    assert caught.value.codes == ["BAD_USER_INPUT"]
    with pytest.raises(GraphQLError) as caught:
        await count(None, limit=0)
    assert caught.value.codes == ["BAD_USER_INPUT"]

    counted = await count({"agent": "demo"})
    replay = await api.gql(REPLAY, {"f": {"agent": "demo"}, "rate": 1}, token=tenant.token)
    assert replay["replayRuns"]["total"] == counted
