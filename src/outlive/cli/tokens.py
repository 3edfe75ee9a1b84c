"""`outlive token create | list | revoke`.

A revocation is committed to PostgreSQL first (from then on no new request or socket gets in),
then announced on Redis so that every API process evicts the token from its principal cache and
closes its open sockets with 4403 within a second.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from uuid import UUID

from redis.exceptions import RedisError

from outlive.cli.cell_of import every_cell, placed_cell, tenant_cell
from outlive.cli.common import CliError, load_settings, run
from outlive.config import DEFAULT_CELL, Settings
from outlive.db.directory import Directory
from outlive.db.models import Role
from outlive.errors import BadUserInput
from outlive.ids import TokenId
from outlive.realtime.revocations import announce_revoked
from outlive.runtime import Runtime, open_runtime
from outlive.services import tenants, tokens

COLUMNS = ("id", "tenant", "user", "created", "expires", "revoked")


class NotAnnounced(Exception):
    """The token is revoked in the database, but Redis could not carry the announcement."""


async def create_token(
    settings: Settings,
    tenant: str,
    email: str,
    expires_in: timedelta | None = None,
    role: Role | None = None,
) -> tuple[Role, str]:
    """A new token (and the tenant and user, when they are new): its role, and the token, shown
    once. `role` None: the member's (ADMIN for a new member)."""
    cell = await placed_cell(settings, tenant)
    async with open_runtime(cell or settings, "cli") as runtime, runtime.sessions.unit() as uow:
        principal, token = await tenants.create_token(
            uow, tenant_slug=tenant, email=email, expires_in=expires_in, role=role
        )
    if cell is None and settings.directory_url is not None:  # a new tenant: the default cell's
        directory = await Directory.open(settings.directory_url)
        try:
            await directory.place(principal.tenant.id, tenant, DEFAULT_CELL)
        finally:
            await directory.close()
    return principal.role, token


def cmd_token_create(args: argparse.Namespace) -> None:
    asked = None if args.role is None else Role(args.role)
    role, token = run(
        create_token(load_settings(), args.tenant, args.email, args.expires_in, asked)
    )
    lifetime = f", expires in {args.expires_in}" if args.expires_in else ""
    print(  # noqa: T201
        f"created a {role.value} token for {args.email} in tenant {args.tenant}{lifetime}"
        " (shown once):"
    )
    print(token)  # noqa: T201


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="seconds")


def format_tokens(records: list[tokens.TokenRecord]) -> list[str]:
    """A tab-separated table: a header, then one line per token (never the token itself)."""
    rows = [
        (str(r.id), r.tenant, r.user, _when(r.created_at), _when(r.expires_at), _when(r.revoked_at))
        for r in records
    ]
    return ["\t".join(row) for row in [COLUMNS, *rows]]


async def list_tokens(settings: Settings, tenant: str | None) -> list[str]:
    """The tenant's tokens, on its cell; without a tenant, every cell's."""
    cells = [await tenant_cell(settings, tenant)] if tenant else await every_cell(settings)
    records: list[tokens.TokenRecord] = []
    for cell in cells:
        async with open_runtime(cell, "cli") as runtime:
            records += await tokens.list_tokens(runtime.sessions, tenant_slug=tenant)
    return format_tokens(records)


def cmd_token_list(args: argparse.Namespace) -> None:
    for line in run(list_tokens(load_settings(), args.tenant)):
        print(line)  # noqa: T201


def parse_token_id(value: str) -> TokenId:
    try:
        return TokenId(UUID(value))
    except ValueError:
        raise BadUserInput(f"{value!r} is not a token id (see `outlive token list`)") from None


async def revoke_token(settings: Settings, value: str) -> str:
    """Revoke, announce; the line to print. Raises `BadUserInput` for an unknown id."""
    token_id = parse_token_id(value)
    for cell in await every_cell(settings):  # a token's id is unique across cells
        async with open_runtime(cell, "cli-queues") as runtime:
            async with runtime.sessions.unit() as uow:
                record = await tokens.revoke_token(uow, token_id)
            if record is not None:
                return await _announced(settings, runtime, token_id, record)
    raise BadUserInput(f"no token {token_id} (see `outlive token list`)")


async def _announced(
    settings: Settings, runtime: Runtime, token_id: TokenId, record: tokens.TokenRecord
) -> str:
    """Announce the revocation on Redis; the line to print."""
    try:
        heard = await announce_revoked(
            runtime.require_queues().redis, settings.redis_url or "", token_id
        )
    except (RedisError, OSError) as exc:
        raise NotAnnounced(
            f"token {token_id} is revoked, but Redis could not announce it ({exc}): API "
            "processes close its sockets at their next re-check (OUTLIVE_WS_RECHECK_S)"
        ) from None
    return (
        f"revoked token {token_id} of {record.user} in tenant {record.tenant} "
        f"at {_when(record.revoked_at)}; {heard} API process(es) closed its sockets"
    )


def cmd_token_revoke(args: argparse.Namespace) -> None:
    try:
        print(run(revoke_token(load_settings(), args.id)))  # noqa: T201
    except NotAnnounced as exc:
        raise CliError(str(exc), 1) from None
