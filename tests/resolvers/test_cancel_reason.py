"""Cancel with a reason (issue 45, item 8): `cancelRun(reason:)` records who cancelled (the
token's user) and why on the run's timeline, in the `cancelled` event of a run that settles at
once and the `cancel_requested` event of a RUNNING one; without a reason only who; a reason
longer than a line is BAD_USER_INPUT and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Api, GraphQLError, TenantHandle

pytestmark = pytest.mark.timeout(60)

RUN = "query($id: ID!) { run(id: $id) { status events(first: 100) { type data } } }"
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
CANCEL = "mutation($id: ID!, $r: String) { cancelRun(id: $id, reason: $r) { id status } }"


async def start(api: Api, tenant: TenantHandle, key: str) -> str:
    options = {"agent": "demo", "key": key, "input": {"turns": 1, "delayMs": 0}}
    return str((await api.gql(START, {"i": options}, token=tenant.token))["startRun"]["run"]["id"])


async def cancelled(api: Api, tenant: TenantHandle, run_id: str) -> list[dict[str, Any]]:
    run = (await api.gql(RUN, {"id": run_id}, token=tenant.token))["run"]
    return [e["data"] for e in run["events"] if e["type"] in ("cancelled", "cancel_requested")]


async def test_a_cancel_records_who_and_why_and_a_long_reason_changes_nothing(
    api: Api, tenant: TenantHandle
) -> None:
    email = tenant.principal.user.email
    with_reason, without = await start(api, tenant, "a"), await start(api, tenant, "b")

    long = "x" * 501
    with pytest.raises(GraphQLError) as refused:
        await api.gql(CANCEL, {"id": with_reason, "r": long}, token=tenant.token)
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert await cancelled(api, tenant, with_reason) == []  # nothing changed

    done = await api.gql(CANCEL, {"id": with_reason, "r": "duplicate order"}, token=tenant.token)
    assert done["cancelRun"]["status"] == "CANCELLED"  # no worker: QUEUED, settled at once
    assert await cancelled(api, tenant, with_reason) == [{"by": email, "reason": "duplicate order"}]

    await api.gql(CANCEL, {"id": without}, token=tenant.token)
    assert await cancelled(api, tenant, without) == [{"by": email}]
