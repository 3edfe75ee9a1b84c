"""Roles (contract §3): the one table of what each mutation needs, walked over the served schema.

Every mutation of the served schema is sent, with arguments of the right types, by a VIEWER and
by an OPERATOR token: each answers FORBIDDEN exactly when `MUTATION_ROLES` says the role is too
low, and a forbidden one changes nothing. A mutation added to the schema without a role fails
`test_every_served_mutation_has_a_role`.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest
from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLType,
    GraphQLUnionType,
    build_schema,
)

from outlive.db.models import Role
from outlive.db.tx import Sessions
from outlive.resolvers.roles import MUTATION_ROLES
from outlive.resolvers.schema import build_schema as served_schema
from outlive.services.tenants import create_token
from tests.support import Api, Servers, TenantHandle

SCHEMA = build_schema(served_schema().as_str())
MUTATIONS = SCHEMA.mutation_type
assert MUTATIONS is not None


def test_every_served_mutation_has_a_role() -> None:
    missing = sorted(set(MUTATIONS.fields) - set(MUTATION_ROLES))
    assert missing == [], f"add these to resolvers/roles.py MUTATION_ROLES: {missing}"


def _value(kind: GraphQLType) -> Any:
    """A value of `kind` that coerces (ids are random: nothing of the tenant's is named)."""
    if isinstance(kind, GraphQLNonNull):
        return _value(kind.of_type)
    if isinstance(kind, GraphQLList):
        return []
    if isinstance(kind, GraphQLEnumType):
        return next(iter(kind.values))
    if isinstance(kind, GraphQLInputObjectType):
        return {
            name: _value(field.type)
            for name, field in kind.fields.items()
            if isinstance(field.type, GraphQLNonNull)
        }
    assert isinstance(kind, GraphQLScalarType)
    return {
        "ID": str(uuid.uuid4()),
        "String": "x",
        "Int": 1,
        "Float": 1.0,
        "Boolean": False,
        "JSON": {},
        "DateTime": "2026-01-01T00:00:00+00:00",
    }[kind.name]


def _document(name: str) -> tuple[str, dict[str, Any]]:
    field = MUTATIONS.fields[name]
    required = {a: arg for a, arg in field.args.items() if isinstance(arg.type, GraphQLNonNull)}
    declared = ", ".join(f"${a}: {arg.type}" for a, arg in required.items())
    passed = ", ".join(f"{a}: ${a}" for a in required)
    result = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
    while isinstance(result, GraphQLList | GraphQLNonNull):
        result = result.of_type
    selection = (
        " { __typename }" if isinstance(result, GraphQLObjectType | GraphQLUnionType) else ""
    )
    head = f"mutation({declared})" if declared else "mutation"
    call = f"{name}({passed})" if passed else name
    return f"{head} {{ {call}{selection} }}", {a: _value(arg.type) for a, arg in required.items()}


async def _token(sessions: Sessions, tenant: TenantHandle, role: Role) -> str:
    async with sessions.unit() as uow:
        _, token = await create_token(
            uow,
            tenant_slug=tenant.principal.tenant.slug,
            email=f"{role.value.lower()}-{uuid.uuid4().hex[:6]}@roles.test",
            role=role,
        )
    return token


_SNAPSHOT = """
    SELECT (SELECT count(*) FROM runs WHERE tenant_id = $1),
           (SELECT count(*) FROM invitations WHERE tenant_id = $1),
           (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1),
           (SELECT count(*) FROM api_tokens WHERE tenant_id = $1),
           (SELECT string_agg(role || coalesce(removed_at::text, ''), ',' ORDER BY id)
              FROM users WHERE tenant_id = $1),
           (SELECT count(*) FROM run_replays WHERE tenant_id = $1)
"""


async def _snapshot(servers: Servers, tenant: TenantHandle) -> tuple[Any, ...]:
    conn = await asyncpg.connect(servers.database_url)
    try:
        return tuple(await conn.fetchrow(_SNAPSHOT, tenant.id))
    finally:
        await conn.close()


@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR])
async def test_each_mutation_answers_forbidden_exactly_as_the_role_table_says(
    api: Api, sessions: Sessions, tenant: TenantHandle, role: Role, servers: Servers
) -> None:
    token = await _token(sessions, tenant, role)
    before = await _snapshot(servers, tenant)
    forbidden, allowed = [], []
    for name in sorted(MUTATIONS.fields):
        query, variables = _document(name)
        body = (await api.post(query, variables, token=token)).json()
        codes = [e.get("extensions", {}).get("code") for e in body.get("errors", [])]
        (forbidden if "FORBIDDEN" in codes else allowed).append(name)
        assert "INTERNAL_SERVER_ERROR" not in codes, (name, body)
    expected = sorted(n for n in MUTATIONS.fields if not role.allows(MUTATION_ROLES[n]))
    assert forbidden == expected
    assert len(allowed) + len(forbidden) == len(MUTATIONS.fields)
    if role is Role.VIEWER:  # every mutation but acceptInvitation is above a VIEWER
        assert allowed == ["acceptInvitation"]
        assert await _snapshot(servers, tenant) == before


async def test_one_forbidden_field_refuses_the_whole_operation_and_runs_none_of_it(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    token = await _token(sessions, tenant, Role.OPERATOR)
    query = """mutation($email: String!) {
        startRun(input: {agent: "demo", input: {turns: 1}}) { run { id } }
        ...Invite
    }
    fragment Invite on Mutation { inviteMember(email: $email) { id } }"""
    body = (await api.post(query, {"email": "who@roles.test"}, token=token)).json()
    runs = await api.gql("{ runs { edges { node { id } } } }", token=tenant.token)

    assert body["data"] is None
    assert [e["extensions"]["code"] for e in body["errors"]] == ["FORBIDDEN"]
    assert "inviteMember (ADMIN)" in body["errors"][0]["message"]
    assert runs["runs"]["edges"] == []  # startRun, which OPERATOR may do, did not run either


async def test_the_viewer_knows_its_role_and_every_existing_token_is_admin(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    viewer = await _token(sessions, tenant, Role.VIEWER)
    asked = "{ viewer { role } }"
    assert (await api.gql(asked, token=viewer))["viewer"]["role"] == "VIEWER"
    assert (await api.gql(asked, token=tenant.token))["viewer"]["role"] == "ADMIN"
    read = await api.gql("{ runs { edges { node { id } } } members { email } }", token=viewer)
    assert read["runs"]["edges"] == []  # a VIEWER reads
    assert len(read["members"]) == 2
