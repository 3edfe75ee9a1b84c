"""Automatic Persisted Queries: Apollo's `persistedQuery` extension (version 1, sha256)."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import httpx

from tests.support import Api, TenantHandle

RUNS = "query Runs($first: Int!) { runs(first: $first) { edges { node { id } } } }"
START = "mutation Start($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"


def _hash(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


def _extension(query: str, version: int = 1) -> dict[str, Any]:
    return {"persistedQuery": {"version": version, "sha256Hash": _hash(query)}}


async def _post(api: Api, token: str, **body: Any) -> httpx.Response:
    return await api.client.post(
        "/graphql", json=body, headers={"Authorization": f"Bearer {token}"}
    )


async def _get(api: Api, token: str, **params: Any) -> httpx.Response:
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
    return await api.client.get(
        "/graphql", params=encoded, headers={"Authorization": f"Bearer {token}"}
    )


async def test_an_unknown_hash_asks_for_the_document_then_the_hash_alone_is_enough(
    api: Api, tenant: TenantHandle
) -> None:
    query = RUNS + " # " + tenant.token[-8:]  # a document this test run has never sent
    variables = {"first": 5}
    unknown = await _post(api, tenant.token, variables=variables, extensions=_extension(query))
    assert unknown.status_code == 200
    (error,) = unknown.json()["errors"]
    assert error["message"] == "PersistedQueryNotFound"
    assert error["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"

    registered = await _post(
        api, tenant.token, query=query, variables=variables, extensions=_extension(query)
    )
    assert registered.json() == {"data": {"runs": {"edges": []}}}

    by_post = await _post(api, tenant.token, variables=variables, extensions=_extension(query))
    by_get = await _get(
        api, tenant.token, operationName="Runs", variables=variables, extensions=_extension(query)
    )
    assert by_post.json() == by_get.json() == registered.json()


async def test_a_hash_that_does_not_match_its_document_is_bad_input(
    api: Api, tenant: TenantHandle
) -> None:
    wrong = {"persistedQuery": {"version": 1, "sha256Hash": _hash("{ agents { name } }")}}
    response = await _post(api, tenant.token, query=RUNS, variables={"first": 1}, extensions=wrong)
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    # and it was not kept under that hash
    again = await _post(api, tenant.token, variables={"first": 1}, extensions=wrong)
    assert again.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


async def test_an_unsupported_version_is_bad_input(api: Api, tenant: TenantHandle) -> None:
    response = await _post(api, tenant.token, query=RUNS, extensions=_extension(RUNS, version=2))
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_an_invalid_document_is_answered_as_usual_and_never_kept(
    api: Api, tenant: TenantHandle
) -> None:
    query = "{ runs { nope } }"
    response = await _post(api, tenant.token, query=query, extensions=_extension(query))
    assert response.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    again = await _post(api, tenant.token, extensions=_extension(query))
    assert again.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


async def test_a_persisted_mutation_runs_over_post_and_never_over_get(
    api: Api, tenant: TenantHandle
) -> None:
    variables = {"i": {"agent": "demo"}}
    first = await _post(
        api, tenant.token, query=START, variables=variables, extensions=_extension(START)
    )
    assert first.json()["data"]["startRun"]["created"] is True
    again = await _post(api, tenant.token, variables=variables, extensions=_extension(START))
    assert again.json()["data"]["startRun"]["created"] is False
    by_get = await _get(api, tenant.token, variables=variables, extensions=_extension(START))
    assert by_get.status_code == 400  # strawberry's answer: no mutations over GET
    assert "mutation" in by_get.text.lower()


async def test_persisted_queries_need_a_token_like_any_other(api: Api) -> None:
    response = await api.client.post(
        "/graphql", json={"query": RUNS, "extensions": _extension(RUNS)}
    )
    assert response.status_code == 401


async def test_a_hash_another_tenant_sent_is_not_found(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    """Issue 19, Low 7: a hash reveals nothing of what other tenants run."""
    query = RUNS + " # only A " + tenant.token[-8:]
    variables = {"first": 1}
    sent = await _post(api, tenant.token, query=query, variables=variables)
    assert sent.json() == {"data": {"runs": {"edges": []}}}
    by_b = await _post(api, other_tenant.token, variables=variables, extensions=_extension(query))
    assert by_b.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
    by_a = await _post(api, tenant.token, variables=variables, extensions=_extension(query))
    assert by_a.json() == sent.json()
    # B registers it in turn (the same cache entry), then its hash is enough for B too
    await _post(
        api, other_tenant.token, query=query, variables=variables, extensions=_extension(query)
    )
    again = await _post(api, other_tenant.token, variables=variables, extensions=_extension(query))
    assert again.json() == {"data": {"runs": {"edges": []}}}


async def test_the_execution_header_reveals_no_count(api: Api, tenant: TenantHandle) -> None:
    """Issue 19, Low 7: the header names the shared execution with a random id, not a
    process-wide counter another tenant could read its neighbours' traffic from."""
    seen = []
    for _ in range(3):
        response = await _post(api, tenant.token, query=RUNS, variables={"first": 1})
        seen.append(response.headers["outlive-execution"])
    assert len(set(seen)) == 3
    assert all(len(value) == 16 for value in seen)
    numbers = sorted(int(value, 16) for value in seen)  # 64 random bits each
    # A counter's values lie next to each other; random ones do not (a gap under 2**32 between
    # two of them has a chance of about 1 in 10**9). Not `isdigit`: 16 random hex digits are
    # all decimal ones once in about 1,800 values, which failed a CI run.
    assert min(b - a for a, b in itertools.pairwise(numbers)) > 2**32


async def test_one_tenants_padded_documents_leave_anothers_persisted_queries(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    """Round 4, L5: nine documents near the 64 KiB limit filled the one 64 MiB cache and flushed
    every tenant's documents; a tenant now evicts only its own, past a quarter of the cache."""
    query = RUNS + " # " + other_tenant.token[-8:]
    variables = {"first": 1}
    await _post(
        api, other_tenant.token, query=query, variables=variables, extensions=_extension(query)
    )
    for i in range(12):
        padded = "{ __typename } #f" + str(i) + "x" * 65_000
        assert (await _post(api, tenant.token, query=padded)).status_code == 200
    by_hash = await _post(
        api, other_tenant.token, variables=variables, extensions=_extension(query)
    )
    assert by_hash.json() == {"data": {"runs": {"edges": []}}}
