"""Every write survives PostgreSQL's generic plans.

asyncpg prepares each statement once per connection. After five executions PostgreSQL may switch
that statement to a generic plan, in which a bound parameter has no value. An `ON CONFLICT …
WHERE <predicate>` whose predicate is a bound parameter then no longer infers the partial unique
index, and the statement fails for good on that connection ("there is no unique or exclusion
constraint matching the ON CONFLICT specification"): `replayRuns` broke after 5 calls this way.

Here the database forces generic plans from the first execution (`plan_cache_mode`), and every
mutation that inserts with `ON CONFLICT` runs more than five times on a one-connection pool.
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from outlive.db.engine import create_engine, create_sessions
from tests.conftest import make_settings, new_tenant
from tests.support import Api, Servers

pytestmark = pytest.mark.timeout(120)

REPLAY = """mutation { replayRuns(filter: {status: [SUCCEEDED]}, limit: 1) { id status } }"""
INVITE = """mutation($e: String!) { inviteMember(email: $e) { id status } }"""
START = (
    """mutation { startRun(input: {agent: "demo", input: {turns: 1}}) { created run { id } } }"""
)
RUNS = 7  # more than the five custom plans PostgreSQL tries before a generic one


async def test_every_on_conflict_write_runs_on_a_generic_plan(servers: Servers) -> None:
    url = await servers.clone()
    name = make_url(url).database
    await servers.admin.execute(f'ALTER DATABASE "{name}" SET plan_cache_mode = force_generic_plan')
    settings = make_settings(
        servers,
        database_url=url,
        db_pool_size=1,
        db_max_overflow=0,
        db_raw_pool_size=1,
        rate_invite_recipient="100/3600",
    )
    engine = create_engine(url)
    try:
        sessions = create_sessions(engine)
        tenant = await new_tenant(sessions, "plans")
        async with Api.running(settings) as api:
            mode = await api.gql("{ viewer { tenant { slug } } }", token=tenant.token)
            assert mode["viewer"]["tenant"]["slug"].startswith("plans-")
            for i in range(RUNS):
                replay = (await api.gql(REPLAY, token=tenant.token))["replayRuns"]
                assert replay["status"] == "DONE"  # nothing matched; the insert itself ran
                invited = await api.gql(INVITE, {"e": f"a{i % 2}@b.test"}, token=tenant.token)
                assert invited["inviteMember"]["id"]
                started = (await api.gql(START, token=tenant.token))["startRun"]
                assert started["run"]["id"]
        for _ in range(RUNS):  # tenants and users are inserted with ON CONFLICT too
            await new_tenant(sessions, "plans")
    finally:
        await engine.dispose()
