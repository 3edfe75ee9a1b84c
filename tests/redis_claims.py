"""Redis db indexes on one shared server: a test run or a bench claims one (a key per index in
db 0, set only if absent, expiring after 6 h should its owner die) and flushes only that one.
Test runs claim from the bottom up, benches from the top down."""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio import Redis

EVERY_INDEX = range(1, 16)
CLAIM_TTL_S = 6 * 3600


def _key(index: int) -> str:
    return f"outlive:test-run:db{index}"


async def claim(claims_url: str, owner: str, order: Iterable[int] = EVERY_INDEX) -> int:
    """The first index in `order` nobody holds, now held by `owner`; `claims_url` is db 0."""
    claims = Redis.from_url(claims_url)
    try:
        for index in order:
            if await claims.set(_key(index), owner, nx=True, ex=CLAIM_TTL_S):
                return index
    finally:
        await claims.aclose()
    raise RuntimeError("every Redis db index 1-15 is claimed by a test run or a bench")


async def release(claims_url: str, index: int) -> None:
    claims = Redis.from_url(claims_url)
    try:
        await claims.delete(_key(index))
    finally:
        await claims.aclose()
