"""A move copies every table that holds a tenant's rows (`outlive.db.copy`): the list is read
from the models, so a table added later is copied, or the import fails until it says how its
rows belong to a tenant. These checks need no database."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, ForeignKey, Integer, MetaData, Table, Uuid

from outlive.db import copy
from outlive.db.models import Base

# Issue 46's governance tables, issue 44's schedules, issue 43's replays: named, so that a
# refactor of `copy` that drops one is caught even if the models' walk changed.
NAMED = {
    "blobs",
    "blob_parts",
    "blob_refs",
    "usage_kept_runs",
    "usage_kept_tokens",
    "erasures",
    "schedules",
    "run_replays",
}


def test_every_table_is_copied_or_shared() -> None:
    copied = {t.name for t in copy.TENANT_TABLES}
    every = {t.name for t in Base.metadata.sorted_tables}
    assert copied | copy.SHARED == every
    assert not copied & copy.SHARED
    assert copied >= NAMED


def test_a_shared_table_holds_no_tenants_rows() -> None:
    tenant_scoped = {"tenants", *copy._VIA}
    for name in copy.SHARED:
        table = Base.metadata.tables[name]
        assert "tenant_id" not in table.columns, name
        assert not {fk.column.table.name for fk in table.foreign_keys} & tenant_scoped, name


def test_every_column_is_copied() -> None:
    """All but the target's identity columns (issue 43's `code_version` among them)."""
    for table in copy.TENANT_TABLES:
        written = set(copy._columns(table))
        identities = {c.name for c in table.columns if c.identity is not None}
        assert written == set(table.columns.keys()) - identities, table.name
    assert "code_version" in copy._columns(Base.metadata.tables["runs"])
    assert "code_version" in copy._columns(Base.metadata.tables["run_steps"])


def test_a_table_with_no_way_to_its_tenant_is_refused() -> None:
    """A new table that neither has `tenant_id` nor hangs from a run or a budget: `scope_of`
    raises (at import, for the models), rather than a move leaving its rows behind."""
    metadata = MetaData()
    Table("parents", metadata, Column("id", Uuid, primary_key=True))
    orphan = Table(
        "orphans",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("parent_id", Uuid, ForeignKey("parents.id")),
    )
    with pytest.raises(LookupError, match="orphans"):
        copy.scope_of(orphan)
