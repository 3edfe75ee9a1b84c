"""`runsByIdPrefix`: a run found by the short id the console shows, in its own tenant only."""

from __future__ import annotations

from tests.support import Api, TenantHandle

LOOKUP = "query($p: String!) { runsByIdPrefix(prefix: $p) { id agent } }"


async def test_a_short_id_finds_the_run_in_its_own_tenant_only(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    mine = (await api.start_run(tenant.token, "demo"))["run"]["id"]
    theirs = (await api.start_run(other_tenant.token, "demo"))["run"]["id"]

    found = await api.gql(LOOKUP, {"p": mine[:8]}, token=tenant.token)
    assert [r["id"] for r in found["runsByIdPrefix"]] == [mine]
    whole = await api.gql(LOOKUP, {"p": mine.upper()}, token=tenant.token)  # dashes, any case
    assert [r["id"] for r in whole["runsByIdPrefix"]] == [mine]
    # another tenant's run reads as missing, as `run(id)` does
    assert (await api.gql(LOOKUP, {"p": theirs[:8]}, token=tenant.token))["runsByIdPrefix"] == []
    # four hex digits at least: anything shorter, or not hex, is refused
    for bad in ("abc", "xyz12345", ""):
        response = await api.post(LOOKUP, {"p": bad}, token=tenant.token)
        assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", bad
