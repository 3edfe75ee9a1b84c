"""Announcing a revoked API token to every API process, on Redis pub/sub.

A revocation is written to PostgreSQL first (that is what makes it true); the announcement only
makes every API process act on it within a second instead of at its next re-check: each one
evicts the token from its principal cache and closes the token's sockets with 4403. The hub
(`realtime.hub`) listens on the channel beside the nudges, on its one Redis connection.
"""

from __future__ import annotations

import json
from uuid import UUID

from redis.asyncio import Redis

from outlive.realtime.nudges import channel_prefix

REVOKED = "token.revoked"


def control_channel(redis_url: str) -> str:
    """The channel of announcements to API processes (kept apart per Redis db, like nudges)."""
    return channel_prefix(redis_url).removesuffix("nudges:") + "control"


def encode_revoked(token_id: UUID) -> str:
    return json.dumps({"type": REVOKED, "tokenId": str(token_id)}, separators=(",", ":"))


def decode_revoked(raw: bytes | str) -> UUID | None:
    """The token id of a revocation announcement; None for anything else."""
    try:
        message = json.loads(raw)
        if message.get("type") != REVOKED:
            return None
        return UUID(message["tokenId"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


async def announce_revoked(redis: Redis, redis_url: str, token_id: UUID) -> int:
    """Publish; the number of API processes that heard it (Redis errors propagate)."""
    heard: int = await redis.publish(control_channel(redis_url), encode_revoked(token_id))
    return heard
