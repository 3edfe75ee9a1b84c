"""`outlive tenant set-limits` with a value PostgreSQL's integer cannot hold is an input error of
its own, not "cannot use PostgreSQL" (issue 19, item 5)."""

from __future__ import annotations

from sqlalchemy import select

from outlive.config import Rate, Settings
from outlive.db.models import Tenant
from outlive.db.tx import Sessions
from tests.support import TenantHandle, service_env
from tests.test_cli import outlive


async def test_a_limit_over_int32_is_refused_as_input(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    slug = tenant.principal.tenant.slug
    env = service_env(settings)
    for flag in ("--max-running-runs", "--max-inflight-jobs"):
        done = outlive("tenant", "set-limits", "--tenant", slug, flag, "2147483648", env=env)
        assert done.returncode == 2
        assert done.stderr.strip() == (
            f"outlive: error: tenant set-limits: argument {flag}: must be at most 2147483647"
        )
    top = outlive(
        "tenant", "set-limits", "--tenant", slug, "--max-running-runs", "2147483647", env=env
    )
    assert top.returncode == 0, top.stderr
    async with sessions.unit() as uow:
        row = await uow.session.scalar(select(Tenant).where(Tenant.id == tenant.id))
    assert row is not None
    assert (row.max_running_runs, row.max_inflight_jobs) == (2147483647, None)


async def test_a_tenant_s_token_rate_is_set_and_reset(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    slug = tenant.principal.tenant.slug
    env = service_env(settings)

    async def token_rate() -> str | None:
        async with sessions.unit() as uow:
            row = await uow.session.scalar(select(Tenant).where(Tenant.id == tenant.id))
        assert row is not None
        return row.llm_token_rate

    done = outlive("tenant", "set-limits", "--tenant", slug, "--llm-token-rate", "5000/60", env=env)
    assert done.returncode == 0, done.stderr
    assert await token_rate() == str(Rate(5000, 60.0))
    done = outlive("tenant", "set-limits", "--tenant", slug, "--llm-token-rate", "default", env=env)
    assert done.returncode == 0, done.stderr
    assert await token_rate() is None
