"""Requests the pipeline refuses before anything executes, each in the contract's JSON error
shape (the fuzzer's R2-R5 and Issue 19's Medium 2, `tests/fuzz` runs them too)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from outlive.config import Settings
from tests.conftest import make_settings
from tests.support import Api, Servers, TenantHandle


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert isinstance(error, dict)
    return error


def _auth(tenant: TenantHandle) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant.token}", "Content-Type": "application/json"}


@pytest.mark.parametrize("body", [b"null", b"1.5", b'"x"', b"true", b"[]", b"\xff\xfe{}"])
async def test_a_body_that_is_not_a_json_object_is_bad_input(
    api: Api, tenant: TenantHandle, body: bytes
) -> None:
    response = await api.client.post("/graphql", content=body, headers=_auth(tenant))
    assert _error(response, 400)["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_non_string_operation_name_is_bad_input(api: Api, tenant: TenantHandle) -> None:
    body = {"query": "{ agents { name } }", "operationName": 5}
    response = await api.client.post("/graphql", json=body, headers=_auth(tenant))
    assert _error(response, 400)["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_subscription_over_http_is_told_to_use_the_websocket(
    api: Api, tenant: TenantHandle
) -> None:
    body = {"query": "subscription { nudges { type } }"}
    for response in (
        await api.client.post("/graphql", json=body, headers=_auth(tenant)),
        await api.client.get("/graphql", params=body, headers=_auth(tenant)),
    ):
        error = _error(response, 400)
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert "WebSocket" in error["message"]


async def test_a_mutation_over_get_and_other_methods_are_json(
    api: Api, tenant: TenantHandle
) -> None:
    params = {"query": 'mutation { revokeToken(id: "x") { ok } }'}
    response = await api.client.get("/graphql", params=params, headers=_auth(tenant))
    assert _error(response, 400)["extensions"]["code"] == "BAD_USER_INPUT"
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        response = await api.client.request(method, "/graphql", headers=_auth(tenant))
        assert _error(response, 405)["extensions"]["code"] == "BAD_USER_INPUT"
        assert response.headers["allow"] == "GET, POST"


async def test_a_document_over_the_byte_limit_is_refused_before_any_cache(
    servers: Servers, tenant: TenantHandle
) -> None:
    """Issue 19, Medium 2: `{agents{name}} #<nonce>` padded with a comment is refused whole
    (413, BAD_USER_INPUT), by bytes, before the document cache sees it."""
    settings: Settings = make_settings(servers, max_query_bytes=2048)
    async with Api.running(settings) as api:
        app: Any = api.client._transport.app  # type: ignore[attr-defined]
        documents = app.graphql.pipeline.documents
        kept = len(documents._cache)
        for padding in ("x" * 2100, "é" * 1100):  # over in characters / over in UTF-8 bytes only
            body = {"query": "{ agents { name } } #" + padding}
            response = await api.client.post("/graphql", json=body, headers=_auth(tenant))
            error = _error(response, 413)
            assert error["extensions"]["code"] == "BAD_USER_INPUT"
            assert "2048 bytes" in error["message"]
        assert len(documents._cache) == kept
        fits = {"query": "{ agents { name } } #" + "x" * 1000}
        response = await api.client.post("/graphql", json=fits, headers=_auth(tenant))
        assert response.status_code == 200
        assert "errors" not in response.json()


@pytest.mark.parametrize("query", ["{}", "query { agents { } }", "{ viewer { user { } } }"])
async def test_an_empty_selection_set_is_invalid_not_a_500(
    api: Api, tenant: TenantHandle, query: str
) -> None:
    """Found by tests/fuzz: graphql-core 3.3 parses `{}`, and strawberry's depth limiter failed
    on it (max() of nothing), a plain-text 500."""
    for response in (
        await api.client.post("/graphql", json={"query": query}, headers=_auth(tenant)),
        await api.client.get("/graphql", params={"query": query}, headers=_auth(tenant)),
    ):
        assert response.status_code == 200, response.text
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
