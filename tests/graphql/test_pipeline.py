"""The pipeline's own bookkeeping: one document cache bounded in bytes, and the route each
operation took, visible on `outlive_graphql_operations_total`."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from outlive.config import Settings
from outlive.graphql.documents import ENTRY_BYTES_PER_CHAR, OWNER_BYTES, Documents, sha256_hex
from outlive.graphql.limits import limit_rules
from outlive.graphql.operations import Route
from outlive.graphql.schema import served_schema
from tests.support import Api, TenantHandle

RUNS = "query PlannedRuns { runs(first: 2) { edges { node { id } } } }"
TIMELINE = 'query Timeline { run(id: "6d2c3b1a-0000-4000-8000-000000000000") { events { seq } } }'
INVALID = "query Broken { runs(first: 2) { nope } }"
OWNER = "tenant-a"  # who sent the documents' text


def _documents(max_bytes: int, share: int | None = None) -> Documents:
    settings = Settings.model_construct()
    schema = served_schema(settings)._schema
    return Documents(
        schema,
        rules=limit_rules(settings),
        max_tokens=settings.max_query_tokens,
        max_bytes=max_bytes,
        tenant_share_bytes=max_bytes if share is None else share,  # one tenant: plain LRU
    )


def test_the_document_cache_keeps_what_fits_in_its_bytes_least_recently_used_out() -> None:
    queries = [f"query Q{i} {{ agents {{ name }} }}" for i in range(4)]
    entry = len(queries[0]) * ENTRY_BYTES_PER_CHAR + OWNER_BYTES  # its text, tree and owner
    documents = _documents(max_bytes=3 * entry)
    first = [documents.prepare(q, OWNER) for q in queries[:3]]
    assert documents.prepare(queries[0], OWNER) is first[0]  # kept, and now the most recent
    documents.prepare(queries[3], OWNER)  # over the budget: the least recently used (Q1) leaves
    assert documents.persisted(first[1].digest, OWNER) is None
    assert documents.persisted(first[0].digest, OWNER) is first[0]
    assert documents.persisted(first[2].digest, OWNER) is first[2]
    assert documents.prepare(queries[1], OWNER) is not first[1]  # prepared again


def test_a_tenant_past_its_share_evicts_only_its_own_documents() -> None:
    queries = [f"query Q{i} {{ agents {{ name }} }}" for i in range(6)]
    entry = len(queries[0]) * ENTRY_BYTES_PER_CHAR + OWNER_BYTES
    documents = _documents(max_bytes=4 * entry, share=2 * entry)
    theirs = documents.prepare(queries[0], "tenant-b")
    for query in queries[1:]:  # tenant A brings in five, over its share of two
        documents.prepare(query, OWNER)
    assert documents.persisted(theirs.digest, "tenant-b") is theirs  # B's entry stays
    kept = [q for q in queries[1:] if documents.persisted(sha256_hex(q), OWNER) is not None]
    assert kept == queries[4:]  # A's two most recent


def test_an_invalid_document_is_cached_but_never_found_by_its_hash() -> None:
    documents = _documents(max_bytes=1 << 20)
    broken = documents.prepare(INVALID, OWNER)
    assert broken.errors
    assert documents.prepare(INVALID, OWNER) is broken
    assert documents.persisted(broken.digest, OWNER) is None


def test_a_hash_is_found_only_by_a_tenant_that_sent_its_text() -> None:
    documents = _documents(max_bytes=1 << 20)
    prepared = documents.prepare(RUNS, OWNER)
    assert documents.persisted(prepared.digest, "tenant-b") is None
    assert documents.persisted(prepared.digest, OWNER) is prepared
    assert documents.prepare(RUNS, "tenant-b") is prepared  # one entry, now of both
    assert documents.persisted(prepared.digest, "tenant-b") is prepared


def test_a_document_over_the_byte_limit_is_never_kept() -> None:
    documents = _documents(max_bytes=1 << 30)
    long = "{ agents { name } } #" + "x" * (64 * 1024)
    prepared = documents.prepare(long, OWNER)
    assert prepared.document is None
    assert prepared.errors
    assert documents.prepare(long, OWNER) is not prepared  # not kept
    assert documents.persisted(prepared.digest, OWNER) is None


def _count(operation: str, route: Route) -> float:
    value = REGISTRY.get_sample_value(
        "outlive_graphql_operations_total",
        {"operation": operation, "type": "query", "outcome": "ok", "route": route.value},
    )
    refused = REGISTRY.get_sample_value(
        "outlive_graphql_operations_total",
        {"operation": operation, "type": "query", "outcome": "error", "route": route.value},
    )
    return (value or 0.0) + (refused or 0.0)


async def _post(api: Api, tenant: TenantHandle, query: str) -> Any:
    response = await api.client.post(
        "/graphql", json={"query": query}, headers={"Authorization": f"Bearer {tenant.token}"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_each_operation_is_counted_under_the_route_it_took(
    api: Api, tenant: TenantHandle
) -> None:
    cases = [
        ("PlannedRuns", RUNS, Route.PLAN),
        ("Timeline", TIMELINE, Route.EXECUTE_UNPLANNABLE),  # a field with a resolver
    ]
    for name, query, route in cases:
        before = _count(name, route)
        await _post(api, tenant, query)
        assert _count(name, route) == before + 1, name


def _invalid() -> float:
    labels = {"operation": "invalid", "type": "unknown", "outcome": "error", "route": "refused"}
    return REGISTRY.get_sample_value("outlive_graphql_operations_total", labels) or 0.0


async def test_only_a_validated_operation_names_its_series(api: Api, tenant: TenantHandle) -> None:
    """Issue 19, Low 6: names a client makes up (an unknown `operationName`, a document that
    does not validate) are counted as `invalid`, never as a label of their own."""
    before = _invalid()
    headers = {"Authorization": f"Bearer {tenant.token}"}
    for i in range(3):
        made_up = {"query": "{ agents { name } }", "operationName": f"MadeUp{i}"}
        response = await api.client.post("/graphql", json=made_up, headers=headers)
        assert response.status_code == 400
    await _post(api, tenant, INVALID)  # declares `Broken`, does not validate
    assert _invalid() == before + 4
    names = {
        sample.labels["operation"]
        for family in REGISTRY.collect()
        if family.name == "outlive_graphql_operations"
        for sample in family.samples
    }
    assert not {"MadeUp0", "MadeUp1", "MadeUp2", "Broken"} & names
