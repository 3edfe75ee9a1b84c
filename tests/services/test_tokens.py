"""API tokens: expiry, revocation, and a principal cache that can never outlive a revocation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete

from outlive.db.models import ApiToken
from outlive.db.tx import Sessions
from outlive.errors import BadUserInput
from outlive.services import tokens
from outlive.services.tenants import authenticate, create_token
from outlive.services.tokens import PrincipalCache
from tests.support import TenantHandle


async def _delete_row(sessions: Sessions, handle: TenantHandle) -> None:
    """Take the token away behind the cache's back (no announcement)."""
    assert handle.principal.token_id is not None
    async with sessions.unit() as uow:
        await uow.execute(delete(ApiToken).where(ApiToken.id == handle.principal.token_id))


async def test_a_revoked_token_no_longer_authenticates(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    assert tenant.principal.token_id is not None
    assert await authenticate(sessions, tenant.token) == tenant.principal
    async with sessions.unit() as uow:
        first = await tokens.revoke_token(uow, tenant.principal.token_id)
    assert first is not None
    assert first.revoked_at is not None
    assert await authenticate(sessions, tenant.token) is None
    async with sessions.unit() as uow:
        again = await tokens.revoke_token(uow, tenant.principal.token_id)
    assert again == first  # idempotent: the first revocation time stays


async def test_an_expired_token_no_longer_authenticates(sessions: Sessions) -> None:
    async with sessions.unit() as uow:
        principal, token = await create_token(
            uow, tenant_slug="expiring", email="a@expiring.test", expires_in=timedelta(hours=1)
        )
    assert principal.expires_at is not None
    assert await authenticate(sessions, token) == principal
    async with sessions.unit() as uow:
        await uow.execute(
            ApiToken.__table__.update()
            .where(ApiToken.id == principal.token_id)
            .values(expires_at=principal.expires_at - timedelta(hours=2))
        )
    assert await authenticate(sessions, token) is None


async def test_a_token_lifetime_must_be_positive(sessions: Sessions) -> None:
    with pytest.raises(BadUserInput, match="positive"):
        async with sessions.unit() as uow:
            await create_token(uow, tenant_slug="x", email="a@x.test", expires_in=timedelta(0))


async def test_listing_tokens_never_shows_a_token(
    sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    mine = await tokens.list_tokens(sessions, tenant_slug=tenant.principal.tenant.slug)
    assert [t.id for t in mine] == [tenant.principal.token_id]
    assert mine[0].user == tenant.principal.user.email
    assert tenant.token not in repr(mine)


async def test_the_cache_answers_without_the_database_until_revoked(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    assert tenant.principal.token_id is not None
    cache = PrincipalCache(60, is_live=lambda: True)
    assert await cache.authenticate(sessions, tenant.token) == tenant.principal
    await _delete_row(sessions, tenant)
    assert await cache.authenticate(sessions, tenant.token) == tenant.principal  # a cache hit
    cache.revoked(tenant.principal.token_id)
    assert await cache.authenticate(sessions, tenant.token) is None


async def test_the_cache_is_bypassed_while_revocations_cannot_be_heard(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    live = True
    cache = PrincipalCache(60, is_live=lambda: live)
    assert await cache.authenticate(sessions, tenant.token) == tenant.principal
    await _delete_row(sessions, tenant)
    live = False  # the control channel is down: a revocation could be missed
    assert await cache.authenticate(sessions, tenant.token) is None


async def test_a_lookup_that_raced_a_revocation_is_not_cached(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    """The row was read before the revocation committed, the announcement arrived before the
    result was stored: storing it would keep a revoked token for the whole TTL."""
    assert tenant.principal.token_id is not None
    token_id = tenant.principal.token_id

    def live_but_revoked_meanwhile() -> bool:
        cache.revoked(token_id)
        return True

    cache = PrincipalCache(60, is_live=live_but_revoked_meanwhile)
    assert await cache.authenticate(sessions, tenant.token) == tenant.principal
    await _delete_row(sessions, tenant)
    assert await cache.authenticate(sessions, tenant.token) is None


async def test_the_cache_never_answers_for_an_expired_token(sessions: Sessions) -> None:
    async with sessions.unit() as uow:
        principal, token = await create_token(
            uow, tenant_slug="short", email="a@short.test", expires_in=timedelta(hours=1)
        )
    assert principal.expires_at is not None
    now = principal.expires_at - timedelta(minutes=30)
    cache = PrincipalCache(3600, is_live=lambda: True, wall_clock=lambda: now)
    assert await cache.authenticate(sessions, token) == principal
    async with sessions.unit() as uow:  # two hours later, as the database sees it
        await uow.execute(
            ApiToken.__table__.update()
            .where(ApiToken.id == principal.token_id)
            .values(expires_at=principal.expires_at - timedelta(hours=2))
        )
    now += timedelta(hours=2)
    assert await cache.authenticate(sessions, token) is None


async def test_unknown_tokens_are_not_cached_and_the_cache_is_bounded(
    sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    cache = PrincipalCache(60, is_live=lambda: True, max_entries=1)
    assert await cache.authenticate(sessions, "olv_unknown") is None
    assert len(cache) == 0
    await cache.authenticate(sessions, tenant.token)
    await cache.authenticate(sessions, other_tenant.token)
    assert len(cache) == 1
    await _delete_row(sessions, tenant)  # evicted by the newer entry: the database answers
    assert await cache.authenticate(sessions, tenant.token) is None
