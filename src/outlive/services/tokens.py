"""API tokens after they are created: listing, revoking, and the per-process principal cache.

A token stops working when it is revoked (`revoked_at`, set once) or when it expires
(`expires_at`). `authenticate` (in `services.tenants`) refuses both, so every new request and
every new socket sees it at once. What could still hold on to a token is state kept in an API
process: the principal cache below and the sockets opened with it. A revocation is therefore
announced on Redis after its commit; every API process evicts the token from its cache and closes
its sockets. The cache is only used while that announcement channel is live (`is_live`), and it
never stores a lookup that raced with a revocation, so it can never hand back a revoked token
for longer than the announcement takes to arrive. A lookup that cannot reach PostgreSQL raises
`ServiceUnavailable` (the db layer's) and stores nothing: the API answers 503, never 401, and a
socket's `connection_init` is closed with 1013 (try again), never 4403.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ARRAY, Uuid, bindparam, text

from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import Db, Sessions, UnitOfWork
from outlive.errors import BadUserInput, NotFound, Unauthenticated
from outlive.ids import RunId, TokenId
from outlive.services.tenants import (
    Principal,
    authenticate,
    hash_token,
    is_token_shaped,
    mint_token,
)

MAX_CACHED = 10_000


@dataclass(frozen=True, slots=True)
class TokenRecord(Record):
    """What `outlive token list` shows: never the token itself (only its hash is stored)."""

    id: TokenId
    tenant: str
    user: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


_TOKENS = (
    "SELECT t.id, t.created_at, t.expires_at, t.revoked_at, s.slug AS tenant, u.email AS user"
    " FROM api_tokens t JOIN tenants s ON s.id = t.tenant_id JOIN users u ON u.id = t.user_id"
)
_ALL_TOKENS = prepare(
    text(
        f"{_TOKENS} WHERE (CAST(:tenant_slug AS text) IS NULL OR s.slug = :tenant_slug)"
        " AND t.run_id IS NULL"  # run read tokens are many and die with their parent
        " ORDER BY t.created_at, t.id"
    )
)


async def list_tokens(db: Db, *, tenant_slug: str | None = None) -> list[TokenRecord]:
    """Every token (of one tenant, when given), oldest first."""
    return [TokenRecord.from_row(r) for r in await db.all(_ALL_TOKENS, tenant_slug=tenant_slug)]


_REVOKE = prepare(
    text("UPDATE api_tokens SET revoked_at = now() WHERE id = :token_id AND revoked_at IS NULL")
)
_TOKEN = prepare(text(f"{_TOKENS} WHERE t.id = :token_id"))


async def revoke_token(uow: UnitOfWork, token_id: TokenId) -> TokenRecord | None:
    """Set `revoked_at` (once: revoking again keeps the first time); None for an unknown id."""
    await uow.execute(_REVOKE, token_id=token_id)
    row = await uow.one(_TOKEN, token_id=token_id)
    return None if row is None else TokenRecord.from_row(row)


@dataclass(frozen=True, slots=True)
class _Cached:
    principal: Principal
    until: float  # monotonic


class PrincipalCache:
    """Bearer token → principal for a few seconds, in one API process.

    - a hit is used only while `is_live()` says the revocation channel is subscribed (a missed
      announcement cannot leave a revoked token cached);
    - `revoked(token_id)` evicts at once and bumps `generation`: a lookup that started before the
      revocation (and may have read the row before it was revoked) is answered but not stored;
    - a token past its `expires_at` is never answered from the cache;
    - unknown tokens are never cached (a new token works at once).
    """

    def __init__(
        self,
        ttl_s: float,
        *,
        is_live: Callable[[], bool],
        max_entries: int = MAX_CACHED,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ttl_s = ttl_s
        self.is_live = is_live
        self.max_entries = max_entries
        self.clock = clock
        self.wall_clock = wall_clock
        self.generation = 0
        self._entries: dict[bytes, _Cached] = {}
        self._by_token: dict[TokenId, bytes] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def authenticate(self, sessions: Sessions, token: str) -> Principal | None:
        if not is_token_shaped(token):
            return None
        if self.ttl_s <= 0:
            return await authenticate(sessions, token)
        key = hash_token(token)
        now = self.clock()
        hit = self._entries.get(key)
        if hit is not None and hit.until > now and self.is_live() and self._unexpired(hit):
            return hit.principal
        generation = self.generation
        principal = await authenticate(sessions, token)
        if principal is None or not self.is_live() or generation != self.generation:
            return principal
        self._store(key, principal, now + self.ttl_s)
        return principal

    def _store(self, key: bytes, principal: Principal, until: float) -> None:
        self._entries.pop(key, None)
        while len(self._entries) >= self.max_entries:  # oldest first (dicts keep insertion order)
            oldest = next(iter(self._entries))
            self._evict(oldest)
        self._entries[key] = _Cached(principal, until)
        if principal.token_id is not None:
            self._by_token[principal.token_id] = key

    def _evict(self, key: bytes) -> None:
        cached = self._entries.pop(key, None)
        if cached is not None and cached.principal.token_id is not None:
            self._by_token.pop(cached.principal.token_id, None)

    def _unexpired(self, hit: _Cached) -> bool:
        expires_at = hit.principal.expires_at
        return expires_at is None or expires_at > self.wall_clock()

    def revoked(self, token_id: TokenId) -> None:
        """Evict the token, and the run read tokens it made (they die with it)."""
        self.generation += 1
        key = self._by_token.pop(token_id, None)
        if key is not None:
            self._entries.pop(key, None)
        children = [k for k, c in self._entries.items() if c.principal.parent_token_id == token_id]
        for child in children:
            self._evict(child)

    def clear(self) -> None:
        """Forget everything (the revocation channel was down: announcements may be lost)."""
        self.generation += 1
        self._entries.clear()
        self._by_token.clear()


_VALID = prepare(
    text(
        "SELECT t.id FROM api_tokens t LEFT JOIN api_tokens parent ON parent.id = t.parent_id"
        " WHERE t.id = ANY(:token_ids) AND t.revoked_at IS NULL"
        " AND (t.expires_at IS NULL OR t.expires_at > now())"
        " AND (t.parent_id IS NULL OR (parent.revoked_at IS NULL"
        " AND (parent.expires_at IS NULL OR parent.expires_at > now())))"
    ).bindparams(bindparam("token_ids", type_=ARRAY(Uuid())))
)


async def still_valid(db: Db, token_ids: Collection[TokenId]) -> set[TokenId]:
    """Those of `token_ids` that still work (not revoked, not expired, not deleted)."""
    if not token_ids:
        return set()
    return {TokenId(r["id"]) for r in await db.all(_VALID, token_ids=list(token_ids))}


_INSERT_READ_TOKEN = prepare(
    text(
        "INSERT INTO api_tokens (tenant_id, user_id, token_hash, expires_at, run_id, parent_id)"
        " SELECT r.tenant_id, :user_id, :token_hash, now() + make_interval(secs => :ttl_s),"
        " r.id, :parent_id FROM runs r WHERE r.id = :run_id AND r.tenant_id = :tenant_id"
        " RETURNING id"
    )
)


async def create_run_read_token(
    uow: UnitOfWork, principal: Principal, run_id: RunId, *, ttl_s: int, max_ttl_s: int
) -> str:
    """A bearer token that reads run `run_id` (of the principal's tenant) and nothing else, for
    `ttl_s` seconds at most, and no longer than the principal's own token works (it dies with
    it). `NotFound` for another tenant's run or an unknown one; a run read token makes none."""
    if principal.token_id is None or principal.is_run_reader:
        raise Unauthenticated("a run read token is made with a tenant's API token")
    if not 1 <= ttl_s <= max_ttl_s:
        raise BadUserInput(f"ttlSeconds is 1 to {max_ttl_s}")
    token = mint_token(principal.tenant.id)
    row = await uow.one(
        _INSERT_READ_TOKEN,
        user_id=principal.user.id,
        token_hash=hash_token(token),
        ttl_s=float(ttl_s),
        run_id=run_id,
        tenant_id=principal.tenant.id,
        parent_id=principal.token_id,
    )
    if row is None:
        raise NotFound(f"no run {run_id}")
    return token
