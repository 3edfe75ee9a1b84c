"""What a deployment serves of the built-in agents (`OUTLIVE_BUILTIN_AGENTS`, issue 39 L5), and
the `llm` agent's model checked against `OUTLIVE_LLM_MODELS` at `startRun` (contract §6)."""

from __future__ import annotations

import pytest

from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, Servers, TenantHandle

AGENTS = "{ agents { name } }"
COUNT = "{ runs { edges { node { id } } } }"


@pytest.mark.parametrize(
    ("served", "names"), [("llm", ["llm"]), ("", []), ("demo,llm", ["demo", "llm"])]
)
async def test_a_deployment_serves_only_the_built_in_agents_it_names(
    servers: Servers, tenant: TenantHandle, served: str, names: list[str]
) -> None:
    async with Api.running(make_settings(servers, builtin_agents=served)) as api:
        listed = [a["name"] for a in (await api.gql(AGENTS, token=tenant.token))["agents"]]
        assert listed == names
        if "demo" not in names:
            with pytest.raises(GraphQLError) as refused:
                await api.start_run(tenant.token, "demo", {"turns": 1})
            assert refused.value.codes == ["BAD_USER_INPUT"]
            assert (await api.gql(COUNT, token=tenant.token))["runs"]["edges"] == []


async def test_an_llm_model_outside_the_list_is_refused_at_start_and_nothing_is_written(
    servers: Servers, tenant: TenantHandle, sessions: Sessions
) -> None:
    settings = make_settings(servers, llm_model="small", llm_models="small,large")
    async with Api.running(settings) as api:
        with pytest.raises(GraphQLError) as refused:
            await api.start_run(tenant.token, "llm", {"prompt": "hi", "model": "huge"})
        assert refused.value.codes == ["BAD_USER_INPUT"]
        assert "'huge' is not allowed here (allowed: large, small)" in str(refused.value)
        assert (await api.gql(COUNT, token=tenant.token))["runs"]["edges"] == []
        started = await api.start_run(tenant.token, "llm", {"prompt": "hi", "model": "large"})
        assert started["created"] is True
