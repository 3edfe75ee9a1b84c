"""Announcing a changed API token to every API process, on Redis pub/sub.

A revocation, a removed member or a changed role is written to PostgreSQL first (that is what
makes it true); the announcement only makes every API process act on it within a second instead
of at its next re-check. Each one evicts the token from its principal cache (the next request
reads its new role, or finds it revoked), and for a revoked token also closes its sockets with
4403. The hub (`realtime.hub`) listens on the channel beside the nudges, on its one Redis
connection.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from redis.asyncio import Redis

from outlive.realtime.nudges import channel_prefix

Change = Literal["token.revoked", "token.changed"]
REVOKED: Change = "token.revoked"  # stops working: evicted, its sockets closed with 4403
CHANGED: Change = "token.changed"  # works with another role now: evicted (sockets stay open)
_CHANGES = (REVOKED, CHANGED)


def control_channel(redis_url: str) -> str:
    """The channel of announcements to API processes (kept apart per Redis db, like nudges)."""
    return channel_prefix(redis_url).removesuffix("nudges:") + "control"


def encode(change: Change, token_id: UUID) -> str:
    return json.dumps({"type": change, "tokenId": str(token_id)}, separators=(",", ":"))


def encode_revoked(token_id: UUID) -> str:
    return encode(REVOKED, token_id)


def decode(raw: bytes | str) -> tuple[Change, UUID] | None:
    """The change and the token id of an announcement; None for anything else."""
    try:
        message = json.loads(raw)
        change = message.get("type")
        if change not in _CHANGES:
            return None
        return change, UUID(message["tokenId"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def decode_revoked(raw: bytes | str) -> UUID | None:
    """The token id of a revocation announcement; None for anything else."""
    decoded = decode(raw)
    return decoded[1] if decoded is not None and decoded[0] == REVOKED else None


async def announce_revoked(redis: Redis, redis_url: str, token_id: UUID) -> int:
    """Publish; the number of API processes that heard it (Redis errors propagate)."""
    heard: int = await redis.publish(control_channel(redis_url), encode_revoked(token_id))
    return heard


@dataclass(frozen=True, slots=True)
class Announcer:
    """What an API process gives the resolvers that change tokens (`removeMember`,
    `setMemberRole`): announce after the commit, to every API process, this one included."""

    redis: Redis
    redis_url: str

    async def announce(self, change: Change, token_ids: Iterable[UUID]) -> None:
        channel = control_channel(self.redis_url)
        for token_id in token_ids:
            await self.redis.publish(channel, encode(change, token_id))
