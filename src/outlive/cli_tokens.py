"""`outlive token list` and `outlive token revoke`: the composition behind those two commands.

A revocation is committed to PostgreSQL first (from then on no new request or socket gets in),
then announced on Redis so that every API process evicts the token from its principal cache and
closes its open sockets with 4403 within a second.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from redis.exceptions import RedisError

from outlive.db.engine import create_engine, create_sessions
from outlive.errors import BadUserInput
from outlive.ids import TokenId
from outlive.jobs.queues import create_redis
from outlive.realtime.revocations import announce_revoked
from outlive.services import tokens

COLUMNS = ("id", "tenant", "user", "created", "expires", "revoked")


class NotAnnounced(Exception):
    """The token is revoked in the database, but Redis could not carry the announcement."""


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="seconds")


def format_tokens(records: list[tokens.TokenRecord]) -> list[str]:
    """A tab-separated table: a header, then one line per token (never the token itself)."""
    rows = [
        (str(r.id), r.tenant, r.user, _when(r.created_at), _when(r.expires_at), _when(r.revoked_at))
        for r in records
    ]
    return ["\t".join(row) for row in [COLUMNS, *rows]]


async def list_tokens(database_url: str, tenant: str | None) -> list[str]:
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        async with create_sessions(engine).read() as session:
            records = await tokens.list_tokens(session, tenant_slug=tenant)
    finally:
        await engine.dispose()
    return format_tokens(records)


def parse_token_id(value: str) -> TokenId:
    try:
        return TokenId(UUID(value))
    except ValueError:
        raise BadUserInput(f"{value!r} is not a token id (see `outlive token list`)") from None


async def revoke_token(database_url: str, redis_url: str, value: str) -> str:
    """Revoke, announce; the line to print. Raises `BadUserInput` for an unknown id."""
    token_id = parse_token_id(value)
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        async with create_sessions(engine).unit() as uow:
            record = await tokens.revoke_token(uow, token_id)
    finally:
        await engine.dispose()
    if record is None:
        raise BadUserInput(f"no token {token_id} (see `outlive token list`)")
    redis = create_redis(redis_url)
    try:
        heard = await announce_revoked(redis, redis_url, token_id)
    except (RedisError, OSError) as exc:
        raise NotAnnounced(
            f"token {token_id} is revoked, but Redis could not announce it ({exc}): API "
            "processes close its sockets at their next re-check (OUTLIVE_WS_RECHECK_S)"
        ) from None
    finally:
        await redis.aclose()
    return (
        f"revoked token {token_id} of {record.user} in tenant {record.tenant} "
        f"at {_when(record.revoked_at)}; {heard} API process(es) closed its sockets"
    )
