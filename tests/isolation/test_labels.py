"""One tenant cannot take every metrics label slot (security review round 4: I1). Before, the
first 200 distinct operation names of a process got labels, whoever sent them: 205 cheap valid
`query FillerN { __typename }` from one tenant made another tenant's real dashboard query
`other`. Each tenant now brings in at most `OUTLIVE_METRICS_OPERATIONS_PER_TENANT` names."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from outlive.telemetry.metrics import OperationLabels
from tests.conftest import make_settings
from tests.support import Api, Servers, TenantHandle

TOKEN = "scrape-me-" + "y" * 16


def test_a_tenant_brings_in_at_most_its_share_of_names() -> None:
    labels = OperationLabels(total=200, per_tenant=20)
    named = [labels.label(f"Filler{i}", "a") for i in range(205)]
    assert named[:20] == [f"Filler{i}" for i in range(20)]
    assert set(named[20:]) == {"other"}
    assert labels.label("RealDashboardQuery", "b") == "RealDashboardQuery"
    assert labels.label("Filler3", "b") == "Filler3"  # a name already labelled: for everyone


async def test_another_tenants_operation_keeps_its_label_after_a_flood_of_names(
    servers: Servers, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    settings = make_settings(servers, metrics_token=TOKEN)
    async with Api.running(settings) as api:
        for i in range(205):
            await api.gql(f"query Filler{i} {{ __typename }}", token=tenant.token)
        await api.gql("query RealDashboardQuery { __typename }", token=other_tenant.token)
        page = await api.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    names = {
        sample.labels["operation"]
        for family in text_string_to_metric_families(page.text)
        if family.name == "outlive_graphql_operations"
        for sample in family.samples
    }
    assert "RealDashboardQuery" in names
    assert "Filler19" in names
    assert "Filler20" not in names  # past the flooding tenant's share
    assert "other" in names
