"""The fuzzer's cases for round five's least privilege (issue 39): operations drawn from the
served schema sent by VIEWER and OPERATOR tokens, any run key or idempotency key, any invitation
code asked for with no token, and any forwarding header in front of them. Each answer: no 5xx,
no ERROR line, JSON; a forbidden mutation is FORBIDDEN and nothing else; a key that was
accepted holds no control, format or separator character."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outlive.config import Settings
from outlive.db.models import Role
from outlive.db.tx import Sessions
from outlive.graphql.schema import served_schema
from outlive.resolvers.roles import MUTATION_ROLES
from outlive.services.tenants import create_token
from tests.fuzz.conftest import Errors, budget, check_answer
from tests.fuzz.strategies import operations
from tests.support import Api, TenantHandle

pytestmark = pytest.mark.timeout(300)

SCHEMA = served_schema(Settings.model_construct())._schema
INVISIBLE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


@pytest.fixture
async def tokens(sessions: Sessions, tenant: TenantHandle) -> dict[Role, str]:
    found = {}
    for role in (Role.VIEWER, Role.OPERATOR):
        async with sessions.unit() as uow:
            _, found[role] = await create_token(
                uow,
                tenant_slug=tenant.principal.tenant.slug,
                email=f"{role.value.lower()}@fuzz.test",
                role=role,
            )
    return found


@budget(300)
@given(operation=operations(SCHEMA), role=st.sampled_from([Role.VIEWER, Role.OPERATOR]))
async def test_any_operation_by_a_lesser_role(
    api: Api,
    tokens: dict[Role, str],
    errors: Errors,
    operation: tuple[str, dict[str, Any]],
    role: Role,
) -> None:
    document, variables = operation
    response = await api.post(document, variables, token=tokens[role])
    check_answer(response)
    answer = response.json()
    codes = {e.get("extensions", {}).get("code") for e in answer.get("errors") or []}
    if "FORBIDDEN" in codes:
        assert answer["data"] is None  # refused whole: nothing ran
        assert codes == {"FORBIDDEN"}
        named = [name for name in MUTATION_ROLES if name in document]
        assert any(not role.allows(MUTATION_ROLES[name]) for name in named), document


START = "mutation($i: StartRunInput!) { startRun(input: $i) { created run { key } } }"


@budget(200)
@given(
    key=st.text(min_size=1, max_size=210),
    idempotency=st.one_of(st.none(), st.text(min_size=1, max_size=210)),
)
async def test_any_key_and_idempotency_key(
    api: Api, tenant: TenantHandle, errors: Errors, key: str, idempotency: str | None
) -> None:
    options: dict[str, Any] = {"agent": "demo", "input": {"turns": 1}, "key": key}
    if idempotency is not None:
        options["idempotencyKey"] = idempotency
    response = await api.post(START, {"i": options}, token=tenant.token)
    check_answer(response)
    answer = response.json()
    if answer.get("data"):
        stored = answer["data"]["startRun"]["run"]["key"]
        assert not any(unicodedata.category(c) in INVISIBLE for c in stored), repr(stored)
    else:
        codes = {e["extensions"]["code"] for e in answer["errors"]}
        assert codes <= {"BAD_USER_INPUT", "IDEMPOTENCY_CONFLICT", "RATE_LIMITED"}, answer


CODE = "query($c: String!) { invitationCode(code: $c) { valid reason } }"
ACCEPT = "mutation($c: String!) { acceptInvitation(code: $c) { token } }"
FORWARDED = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.lists(st.ip_addresses().map(str), max_size=4).map(", ".join),
)


@budget(200)
@given(
    code=st.text(max_size=300),
    accept=st.booleans(),
    xff=FORWARDED,
    forwarded=st.one_of(st.none(), st.text(max_size=60)),
)
async def test_any_code_and_forwarding_headers_without_a_token(
    api: Api,
    errors: Errors,
    code: str,
    accept: bool,
    xff: str | None,
    forwarded: str | None,
) -> None:
    headers = {}
    if xff is not None:
        headers["X-Forwarded-For"] = xff.encode("latin-1", "replace").decode("latin-1")
    if forwarded is not None:
        headers["Forwarded"] = forwarded.encode("latin-1", "replace").decode("latin-1")
    body = {"query": ACCEPT if accept else CODE, "variables": {"c": code}}
    try:
        response = await api.client.post("/graphql", json=body, headers=headers)
    except UnicodeEncodeError:
        return  # httpx refuses a header it cannot send: nothing reached the server
    check_answer(response)
    answer = response.json()
    for error in answer.get("errors") or []:
        assert error["extensions"]["code"] in {"BAD_USER_INPUT", "RATE_LIMITED"}, answer
    if not accept and answer.get("data"):
        assert answer["data"]["invitationCode"]["valid"] is False  # no such code here
