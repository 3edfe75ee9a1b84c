"""`Run.childCounts` and `Run.ancestors`, what the console's tree needs besides `children`: the
children counted per status, and the path from the root down to the run's parent. Rows are seeded
directly (the agents are not what is under test; tests/workflows/test_children.py makes real
trees); every read is the asking tenant's only."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import text

from outlive.db.tx import Sessions
from tests.support import Api, TenantHandle

INSERT = text(
    """INSERT INTO runs (tenant_id, agent, input, status, key, parent_id, root_id, parent_step,
                         depth, dispatched_at, finished_at)
       VALUES (:tenant_id, 'demo', '{}'::jsonb, CAST(:status AS text), :key, :parent_id,
               :root_id, :step, :depth, NULL,
               CASE WHEN CAST(:status AS text) IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                    THEN now() END)
       RETURNING id"""
)
TREE = """query($id: ID!) { run(id: $id) { id childCounts { status count }
  ancestors { id status parentId rootId childCounts { status count } } } }"""


class Seeder:
    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.made = 0

    async def run(
        self, tenant: TenantHandle, status: str, parent: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A run of `tenant` (a child of `parent` when given), with a key of its own."""
        self.made += 1
        row = {
            "tenant_id": tenant.id,
            "status": status,
            "key": f"tree-{self.made}",
            "parent_id": parent["id"] if parent else None,
            "root_id": (parent["root_id"] or parent["id"]) if parent else None,
            "step": f"demo#{self.made}" if parent else None,
            "depth": parent["depth"] + 1 if parent else 0,
        }
        async with self.sessions.unit() as uow:
            made = (await uow.session.execute(INSERT, row)).scalar_one()
        return {**row, "id": made, "str": str(made)}


async def read(api: Api, tenant: TenantHandle, run: dict[str, Any]) -> Any:
    return (await api.gql(TREE, {"id": run["str"]}, token=tenant.token))["run"]


async def test_a_run_reads_its_childrens_counts_and_its_path_from_the_root(
    api: Api, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    seed = Seeder(sessions)
    root = await seed.run(tenant, "WAITING")
    mid = await seed.run(tenant, "WAITING", root)
    leaf = await seed.run(tenant, "QUEUED", mid)
    for status in ("SUCCEEDED", "FAILED", "SUCCEEDED"):
        await seed.run(tenant, status, root)
    # Another tenant's row under this tenant's root (never made by the service; the reads must
    # not trust `parent_id` to stay within a tenant).
    stranger = await seed.run(other_tenant, "CANCELLED", root)

    top = await read(api, tenant, root)
    assert top["ancestors"] == []
    assert top["childCounts"] == [
        {"status": "SUCCEEDED", "count": 2},
        {"status": "FAILED", "count": 1},
        {"status": "WAITING", "count": 1},
    ]
    bottom = await read(api, tenant, leaf)
    assert bottom["childCounts"] == []
    assert [a["id"] for a in bottom["ancestors"]] == [root["str"], mid["str"]]
    assert [a["parentId"] for a in bottom["ancestors"]] == [None, root["str"]]
    assert {a["rootId"] for a in bottom["ancestors"]} == {root["str"]}
    assert bottom["ancestors"][1]["childCounts"] == [{"status": "QUEUED", "count": 1}]

    assert await read(api, other_tenant, leaf) is None  # another tenant's run: not found
    theirs = await read(api, other_tenant, stranger)
    assert theirs["ancestors"] == []  # its parent is not this tenant's: no path through it


async def test_the_path_up_stops_at_the_deepest_tree_allowed(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    """Depth is at most 8 below the root; rows that say otherwise (or a cycle) cannot make the
    walk up go further."""
    seed = Seeder(sessions)
    chain = [await seed.run(tenant, "SUCCEEDED")]
    for _ in range(10):
        chain.append(await seed.run(tenant, "SUCCEEDED", chain[-1]))
    bottom = await read(api, tenant, chain[-1])
    assert [a["id"] for a in bottom["ancestors"]] == [r["str"] for r in chain[2:10]]

    async with sessions.unit() as uow:  # a cycle: the root's parent is its grandchild
        await uow.session.execute(
            text("UPDATE runs SET parent_id = :child WHERE id = :root"),
            {"child": UUID(chain[2]["str"]), "root": chain[0]["id"]},
        )
    looped = await read(api, tenant, chain[2])
    assert len(looped["ancestors"]) == 8
