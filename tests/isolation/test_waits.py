"""A decision answers the wait it was made for (security review round 4: L4). Before, every
accepted signal was kept in the mailbox: a second decision sent with another idempotency key
answered the run's next wait of that name, and nothing could tie a decision to the wait a person
saw. A signal bound to a wait (`waitId`) is taken by that wait only, at once, and is not
accepted once that wait is over; plain signals keep the mailbox's first in, first out."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import pytest

from outlive.config import Settings
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle, settled
from tests.waits.test_signals import demo, waiting, watch

__all__ = ["watch"]  # the fixture, shared with tests/waits

SIGNAL = """mutation($i: SignalRunInput!) {
  signalRun(input: $i) { accepted run { status waitingFor waitId } } }"""
READ = "query($id: ID!) { run(id: $id) { status attempt waitingFor waitId } }"


async def _send(api: Api, token: str, **i: Any) -> dict[str, Any]:
    data = await api.gql(SIGNAL, {"i": i}, token=token)
    result: dict[str, Any] = data["signalRun"]
    return result


async def _kept(settings: Settings, run_id: str) -> int:
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        query = "SELECT count(*) FROM run_signals WHERE run_id = $1 AND delivered_at IS NULL"
        return int(await conn.fetchval(query, UUID(run_id)))
    finally:
        await conn.close()


@pytest.mark.usefixtures("worker")
async def test_a_decision_bound_to_a_wait_is_refused_once_that_wait_is_over(
    api: Api, settings: Settings, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant, awaitSignal="approval")
    await watch.until(run_id, waiting)
    read = (await api.gql(READ, {"id": run_id}, token=tenant.token))["run"]
    assert read["waitingFor"] == "approval"
    wait_id = read["waitId"]
    assert wait_id is not None
    yes = {"approved": True}
    first = await _send(api, tenant.token, id=run_id, name="approval", payload=yes, waitId=wait_id)
    assert first["accepted"] is True
    assert first["run"]["waitId"] is None  # woken: it waits no more
    # a second decision for the same wait, under another key (an API client's retry)
    late = await _send(
        api,
        tenant.token,
        id=run_id,
        name="approval",
        payload={"approved": False},
        waitId=wait_id,
        idempotencyKey="api-retry-1",
    )
    assert late["accepted"] is False
    assert await _kept(settings, run_id) == 0  # nothing left to answer a later wait
    done = await watch.until(run_id, settled)
    assert done.output == {"turns": 1, "signal": yes, "timedOut": False}


@pytest.mark.usefixtures("worker")
async def test_a_bound_decision_names_a_wait_the_run_has_begun_and_its_signal(
    api: Api, settings: Settings, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await demo(api, tenant, awaitSignal="approval", delayMs=0)
    # a wait the run has not begun: nothing can be bound ahead of the question
    with pytest.raises(GraphQLError) as early:
        await _send(api, tenant.token, id=run_id, name="approval", waitId="wait-9")
    assert early.value.codes == ["BAD_USER_INPUT"]
    await watch.until(run_id, waiting)
    wait_id = (await api.gql(READ, {"id": run_id}, token=tenant.token))["run"]["waitId"]
    for name, bound in (("other", wait_id), ("approval", "approval#1"), ("approval", "wait-x")):
        with pytest.raises(GraphQLError) as refused:
            await _send(api, tenant.token, id=run_id, name=name, waitId=bound)
        assert refused.value.codes == ["BAD_USER_INPUT"], (name, bound)
    assert await _kept(settings, run_id) == 0
    read = (await api.gql(READ, {"id": run_id}, token=tenant.token))["run"]
    assert read["status"] == "WAITING"  # still waiting: none of those answered it
    await api.cancel(tenant.token, run_id)


async def test_a_plain_signal_before_the_wait_is_still_kept_for_it(
    api: Api, settings: Settings, tenant: TenantHandle
) -> None:
    """Contract §7: a signal sent before the run waits is kept (first in, first out)."""
    run_id = await demo(api, tenant, awaitSignal="approval")
    sent = await _send(api, tenant.token, id=run_id, name="approval", payload={"approved": True})
    assert sent["accepted"] is True
    assert sent["run"]["waitId"] is None  # QUEUED: no wait yet
    assert await _kept(settings, run_id) == 1
    await api.cancel(tenant.token, run_id)
