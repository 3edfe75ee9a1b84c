"""The statements of `runs(...)`: a page of a tenant's runs, one prepared statement per order and
combination of the optional filters, built once at import from constants (every value is a bound
parameter)."""

from __future__ import annotations

from itertools import product

from sqlalchemy import text

from outlive.db.raw import Statement, prepare
from outlive.services.runs.queries import RUN_COLUMNS


def tags_match(tags: str) -> str:
    """The condition "the run carries every tag of `tags`" (SQL for a varchar[] of them), for the
    tenant of `:tenant_id`, spelled as `ix_runs_tenant_tags` is: its expression (tenant-prefixed
    tags) and its predicate (`tags <> '{}'`). Without the predicate the partial index is no
    candidate at all, and every run of the tenant is tested with the function (about 10 µs a run):
    the erasure's lookup lacked it (docs/governance.md)."""
    return (
        "outlive_tenant_tags(tenant_id, tags)"
        f" @> outlive_tenant_tags(CAST(:tenant_id AS uuid), {tags}) AND tags <> '{{}}'"
    )


# The optional filters of `runs(key:, tags:, topLevel:, scheduleId:)`, each spelled so that the
# planner can use its partial index (`ix_runs_tenant_key`, `ix_runs_tenant_tags`, whose entries
# are tenant-prefixed tags; `uq_runs_schedule_occurrence`): one statement per combination.
_FILTERS = (
    " AND key = CAST(:key AS text)",
    " AND " + tags_match("CAST(:tags AS varchar[])"),
    " AND parent_id IS NULL",
    " AND schedule_id = CAST(:schedule_id AS uuid)",
)


def page_filters(*, key: bool, tags: bool, top_level: bool, schedule: bool = False) -> str:
    """The filters' text for the combination asked: a key of `RUNS_PAGES`."""
    wanted = (key, tags, top_level, schedule)
    return "".join(f for f, on in zip(_FILTERS, wanted, strict=True) if on)


PAGE_FILTERS = tuple(
    page_filters(key=k, tags=t, top_level=p, schedule=s)
    for k, t, p, s in product((False, True), repeat=4)
)


def _where(filters: str) -> str:
    """The runs list's filters, in one place (a page and its count use the same): the tenant,
    statuses, agent, created in [since, until), held or not, and the optional `filters`."""
    return (
        "tenant_id = :tenant_id"
        " AND (CAST(:statuses AS text[]) IS NULL OR status = ANY(CAST(:statuses AS text[])))"
        " AND (CAST(:agent AS text) IS NULL OR agent = CAST(:agent AS text))"
        " AND (CAST(:since AS timestamptz) IS NULL"
        " OR created_at >= CAST(:since AS timestamptz))"
        " AND (CAST(:until AS timestamptz) IS NULL"
        " OR created_at < CAST(:until AS timestamptz))"
        f" AND (CAST(:paused AS boolean) IS NULL OR ({_HELD}) = CAST(:paused AS boolean)){filters}"
    )


# `runs(paused:)`: held now by a pause (a RUNNING run from its next step) or by a budget.
_HELD = (
    "status IN ('QUEUED', 'RUNNING', 'WAITING')"
    " AND (paused_at IS NOT NULL OR held_by_budget_id IS NOT NULL)"
)


def _runs_page(order: str, beyond: str, filters: str = "") -> Statement:
    """A page of a tenant's runs in `order` of (created_at, id), keyset-paginated: the rows
    `beyond` the cursor's. `ix_runs_tenant_newest` serves either direction (a backward scan)."""
    return prepare(
        text(
            f"SELECT * FROM runs WHERE {_where(filters)}"
            " AND (CAST(:after_at AS timestamptz) IS NULL"
            f" OR (created_at, id) {beyond}"
            " (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid)))"
            f" ORDER BY created_at {order}, id {order} LIMIT :limit"
        ).columns(*RUN_COLUMNS)
    )


def _runs_count(filters: str) -> Statement:
    """How many runs match (every page), counting at most `:cap` rows: a bounded count."""
    return prepare(
        text(
            "SELECT count(*) AS n FROM (SELECT 1 FROM runs"
            f" WHERE {_where(filters)} LIMIT :cap) matched"
        )
    )


# (newest first?, filters) -> the statement
RUNS_PAGES = {
    (newest, filters): _runs_page("DESC" if newest else "ASC", "<" if newest else ">", filters)
    for newest in (True, False)
    for filters in PAGE_FILTERS
}
# filters -> the bounded count of the runs that match
RUNS_COUNTS = {filters: _runs_count(filters) for filters in PAGE_FILTERS}
