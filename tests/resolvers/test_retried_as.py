"""Run.retriedAsIds: a retried run names the runs that retried it (newest first), the other way
along retriedFromId; another tenant's runs are never among them."""

from __future__ import annotations

import pytest

from tests.resolvers.test_replays import RETRY
from tests.support import Api, TenantHandle

pytestmark = pytest.mark.timeout(60)

LINKS = """query($id: ID!) { run(id: $id) { id retriedFromId retriedAsIds } }"""


async def test_a_retried_run_links_to_the_runs_that_retried_it(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    first = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
    await api.cancel(tenant.token, first)  # QUEUED: settled at once (no worker)
    links = (await api.gql(LINKS, {"id": first}, token=tenant.token))["run"]
    assert (links["retriedFromId"], links["retriedAsIds"]) == (None, [])
    retries = []
    for _ in range(2):
        again = (await api.gql(RETRY, {"id": first}, token=tenant.token))["retryRun"]
        assert again["created"] is True
        retries.append(again["run"]["id"])
        await api.cancel(tenant.token, again["run"]["id"])  # so the next retry is a new run
    links = (await api.gql(LINKS, {"id": first}, token=tenant.token))["run"]
    assert links["retriedAsIds"] == retries[::-1]  # newest first
    back = (await api.gql(LINKS, {"id": retries[0]}, token=tenant.token))["run"]
    assert (back["retriedFromId"], back["retriedAsIds"]) == (first, [])
    theirs = await api.gql(LINKS, {"id": first}, token=other_tenant.token)
    assert theirs["run"] is None
