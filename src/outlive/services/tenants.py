"""Tenants, users and API tokens. A token is shown once; only its SHA-256 is stored."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import Role
from outlive.db.raw import prepare
from outlive.db.tx import Sessions, UnitOfWork
from outlive.errors import BadUserInput, NotFound
from outlive.ids import RunId, TenantId, TokenId, UserId

TOKEN_PREFIX = "olv_"  # noqa: S105 (a prefix that makes leaked tokens greppable)
_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]{2,}$")


@dataclass(frozen=True, slots=True)
class TenantRecord:
    id: TenantId
    slug: str
    name: str


@dataclass(frozen=True, slots=True)
class UserRecord:
    id: UserId
    email: str


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as; every tenant-owned read and write is scoped by `tenant.id`.

    `role` is what it may change: the lower of its token's role and its member's (contract §3).
    `token_id` names the API token it came from (revocation closes that token's sockets);
    `expires_at` is when that token stops working (None: never). A run read token
    (`createRunReadToken`) has `run_id`, the one run it reads, and `parent_token_id`, the token
    that made it (and whose revocation or expiry ends it too)."""

    user: UserRecord
    tenant: TenantRecord
    role: Role
    token_id: TokenId | None = None
    expires_at: datetime | None = None
    run_id: RunId | None = None
    parent_token_id: TokenId | None = None

    @property
    def is_run_reader(self) -> bool:
        """A run read token: reads its one run, writes nothing."""
        return self.run_id is not None


def mint_token(tenant_id: TenantId) -> str:
    """A new bearer token of `tenant_id`: `olv_`, the tenant's id (22 characters of base64url),
    a dot, 43 random characters. The tenant part routes the token to its tenant's cell without a
    lookup (`outlive.db.directory`); it proves nothing: the token is found by its hash, in the
    cell, and must belong to that tenant there."""
    return f"{TOKEN_PREFIX}{naming_secret(tenant_id)}"


def naming_secret(tenant_id: TenantId) -> str:
    """A new secret that names its tenant (a token's body, an invitation code): the tenant's id
    (22 characters of base64url), a dot, 43 random characters; `token_tenant` reads it back."""
    tenant = base64.urlsafe_b64encode(tenant_id.bytes).rstrip(b"=").decode()
    return f"{tenant}.{secrets.token_urlsafe(32)}"


def token_tenant(token: str) -> TenantId | None:
    """The tenant a token or an invitation code names (`naming_secret`); None for one made
    before round five (no tenant part: its deployment has one cell, or the directory lists it)
    or a malformed one."""
    head, dot, _ = token.removeprefix(TOKEN_PREFIX).partition(".")
    if not dot or len(head) != 22:
        return None
    try:
        return TenantId(UUID(bytes=base64.urlsafe_b64decode(head + "==")))
    except (binascii.Error, ValueError):
        return None


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def check_email(email: str) -> str:
    email = email.strip()
    if len(email) > 254 or not _EMAIL.match(email):
        raise BadUserInput(f"{email!r} is not a valid email address")
    return email.lower()


def check_slug(slug: str) -> str:
    if not _SLUG.match(slug):
        raise BadUserInput(
            f"{slug!r} is not a valid tenant slug (lowercase letters, digits and '-', max 64)"
        )
    return slug


# Idempotent: the tenant and the user are created when missing, then read back (in a statement
# of its own: a row a concurrent insert committed meanwhile is visible to the next snapshot only).
_INSERT_TENANT = prepare(
    text("INSERT INTO tenants (slug, name) VALUES (:slug, :slug) ON CONFLICT (slug) DO NOTHING")
)
_TENANT = prepare(text("SELECT id, slug, name FROM tenants WHERE slug = :slug"))
_INSERT_USER = prepare(
    text(
        "INSERT INTO users (tenant_id, email, role) VALUES (:tenant_id, :email, :role)"
        " ON CONFLICT (tenant_id, email) DO NOTHING"
    )
)
_USER = prepare(
    text(
        "SELECT id, email, role, removed_at IS NOT NULL AS is_removed FROM users"
        " WHERE tenant_id = :tenant_id AND email = :email FOR UPDATE"
    )
)
_REJOIN = prepare(
    text("UPDATE users SET removed_at = NULL, role = :role WHERE id = :user_id RETURNING role")
)
_INSERT_TOKEN = prepare(
    text(
        "INSERT INTO api_tokens (tenant_id, user_id, token_hash, expires_at, role)"
        " VALUES (:tenant_id, :user_id, :token_hash, now() + CAST(:expires_in AS interval), :role)"
        " RETURNING id, expires_at"
    )
)


class RoleAboveMember(BadUserInput):
    """A token may not do more than its member (`outlive token create --role`)."""


async def create_token(
    uow: UnitOfWork,
    *,
    tenant_slug: str,
    email: str,
    expires_in: timedelta | None = None,
    role: Role | None = None,
) -> tuple[Principal, str]:
    """Create the tenant and the user when missing, then a new token (returned once) that stops
    working after `expires_in` (never, when None). `role` is the token's (None: its member's).
    A new member, or a removed one made a member again, gets `role` (None: ADMIN); an existing
    member keeps theirs, and a token above it is refused (`RoleAboveMember`)."""
    slug, email = check_slug(tenant_slug), check_email(email)
    if expires_in is not None and expires_in <= timedelta(0):
        raise BadUserInput("a token's lifetime must be positive")
    await uow.execute(_INSERT_TENANT, slug=slug)
    tenant = await uow.one(_TENANT, slug=slug)
    assert tenant is not None  # noqa: S101 (inserted, or there already)
    joining = role or Role.ADMIN
    await uow.execute(_INSERT_USER, tenant_id=tenant["id"], email=email, role=joining)
    user = await uow.one(_USER, tenant_id=tenant["id"], email=email)
    assert user is not None  # noqa: S101 (inserted, or there already)
    member = Role(user["role"])
    if user["is_removed"]:
        rejoined = await uow.one(_REJOIN, user_id=user["id"], role=joining)
        assert rejoined is not None  # noqa: S101 (the row was just read, under its lock)
        member = Role(rejoined["role"])
    elif role is not None and not member.allows(role):
        raise RoleAboveMember(
            f"{email} is {member.value} in tenant {slug}: a token cannot do more than its member"
            f" (ask for --role {member.value}, or change the member's role with setMemberRole)"
        )
    token = mint_token(TenantId(tenant["id"]))
    row = await uow.one(
        _INSERT_TOKEN,
        tenant_id=tenant["id"],
        user_id=user["id"],
        token_hash=hash_token(token),
        expires_in=expires_in,
        role=role or member,
    )
    assert row is not None  # noqa: S101 (an INSERT … RETURNING returns its row)
    principal = Principal(
        user=UserRecord(id=UserId(user["id"]), email=user["email"]),
        tenant=TenantRecord(id=TenantId(tenant["id"]), slug=tenant["slug"], name=tenant["name"]),
        role=role or member,
        token_id=TokenId(row["id"]),
        expires_at=row["expires_at"],
    )
    return principal, token


# A run read token works while the token that made it works (`parent`); it expires with it.
_AUTHENTICATE = prepare(
    text(
        "SELECT users.id AS user_id, users.email, tenants.id AS tenant_id, tenants.slug,"
        " tenants.name, api_tokens.id AS token_id, api_tokens.run_id, api_tokens.parent_id,"
        " api_tokens.role AS token_role, users.role AS member_role,"
        " LEAST(api_tokens.expires_at, parent.expires_at) AS expires_at FROM api_tokens"
        " JOIN users ON users.id = api_tokens.user_id"
        " JOIN tenants ON tenants.id = api_tokens.tenant_id"
        " LEFT JOIN api_tokens parent ON parent.id = api_tokens.parent_id"
        " WHERE api_tokens.token_hash = :token_hash AND api_tokens.revoked_at IS NULL"
        " AND users.removed_at IS NULL"
        " AND (api_tokens.expires_at IS NULL OR api_tokens.expires_at > now())"
        " AND (api_tokens.parent_id IS NULL OR (parent.revoked_at IS NULL"
        " AND (parent.expires_at IS NULL OR parent.expires_at > now())))"
    )
)


def is_token_shaped(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX) and len(token) <= 200


async def authenticate(sessions: Sessions, token: str) -> Principal | None:
    """The principal behind a bearer token, or None for an unknown, revoked or expired one (one
    indexed lookup)."""
    if not is_token_shaped(token):
        return None
    row = await sessions.one(_AUTHENTICATE, token_hash=hash_token(token))
    if row is None:
        return None
    return Principal(
        user=UserRecord(id=UserId(row["user_id"]), email=row["email"]),
        tenant=TenantRecord(id=TenantId(row["tenant_id"]), slug=row["slug"], name=row["name"]),
        role=Role.effective(Role(row["token_role"]), Role(row["member_role"])),
        token_id=TokenId(row["token_id"]),
        expires_at=row["expires_at"],
        run_id=None if row["run_id"] is None else RunId(row["run_id"]),
        parent_token_id=None if row["parent_id"] is None else TokenId(row["parent_id"]),
    )


LIMITS = ("max_running_runs", "max_inflight_jobs")


@dataclass(frozen=True, slots=True)
class TenantLimits:
    id: TenantId
    slug: str
    max_running_runs: int | None  # None: the deployment's default
    max_inflight_jobs: int | None


# Only the caps named in a change are written (NULL: back to the deployment's default).
_SET_LIMITS = prepare(
    text(
        "UPDATE tenants SET"
        " max_running_runs = CASE WHEN CAST(:set_runs AS boolean)"
        " THEN CAST(:runs AS int) ELSE max_running_runs END,"
        " max_inflight_jobs = CASE WHEN CAST(:set_jobs AS boolean)"
        " THEN CAST(:jobs AS int) ELSE max_inflight_jobs END"
        " WHERE slug = :slug RETURNING id, slug, max_running_runs, max_inflight_jobs"
    )
)


async def set_limits(
    uow: UnitOfWork, *, tenant_slug: str, changes: Mapping[str, int | None]
) -> TenantLimits:
    """Override some of a tenant's caps (`LIMITS`); None resets one to the default."""
    for name, value in changes.items():
        if name not in LIMITS:
            raise BadUserInput(f"unknown limit {name!r}; known: {', '.join(LIMITS)}")
        if value is not None and value < 1:
            raise BadUserInput(f"{name.replace('_', '-')} is a whole number of at least 1")
    slug = check_slug(tenant_slug)
    row = await uow.one(
        _SET_LIMITS,
        slug=slug,
        set_runs="max_running_runs" in changes,
        runs=changes.get("max_running_runs"),
        set_jobs="max_inflight_jobs" in changes,
        jobs=changes.get("max_inflight_jobs"),
    )
    if row is None:
        raise NotFound(f"no tenant {tenant_slug!r}")
    return TenantLimits(
        TenantId(row["id"]), row["slug"], row["max_running_runs"], row["max_inflight_jobs"]
    )
