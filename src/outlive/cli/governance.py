"""`outlive tenant set-retention SLUG DAYS` and `outlive tenant erase-subject SLUG TAG`: as
`setRetention` / `eraseSubject` (contract §1, §4.2), for operators. The erasure is recorded as
done by `cli`; its receipt is printed, one `name: count` a line. `outlive tenant encrypt SLUG`
and `outlive tenant rewrap --old-key OLD`: encryption at rest (`services.sealing`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from outlive.cli.cell_of import tenant_cell
from outlive.cli.common import CliError, load_settings, run
from outlive.config import Settings
from outlive.errors import BadUserInput
from outlive.jobs.forget import RunForgetter
from outlive.runtime import Role, open_runtime
from outlive.services import erasure, retention, sealing

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


async def set_retention(settings: Settings, slug: str, days: int) -> str:
    settings = await tenant_cell(settings, slug)
    async with open_runtime(settings, "cli") as runtime:
        try:
            found = await retention.set_retention_by_slug(runtime.sessions, slug, days)
        except BadUserInput as exc:
            raise CliError(str(exc), 2) from None
    if not found:
        raise CliError(f"no tenant {slug!r}", 2)
    return f"{slug}: settled runs are kept {days} day(s)"


async def erase_subject(settings: Settings, slug: str, tag: str) -> str:
    settings = await tenant_cell(settings, slug)
    role: Role = "cli-queues" if settings.redis_url else "cli"
    async with open_runtime(settings, role) as runtime:
        tenant_id = await retention.tenant_by_slug(runtime.sessions, slug)
        if tenant_id is None:
            raise CliError(f"no tenant {slug!r}", 2)
        queues = runtime.queues
        forget = (
            erasure.forget_nothing if queues is None else RunForgetter(queues.runs, queues.redis)
        )
        try:
            receipt = await erasure.erase_subject(
                runtime.sessions, tenant_id, tag, by="cli", forget=forget
            )
        except BadUserInput as exc:
            raise CliError(str(exc), 2) from None
    counts = ("runs", "steps", "events", "signals", "deliveries", "blobs")
    lines = [f"{slug}: erased tag {receipt.tag!r} at {receipt.at.isoformat()}"]
    lines += [f"{name}: {getattr(receipt, name)}" for name in counts]
    return "\n".join(lines)


def cmd_tenant_set_retention(args: argparse.Namespace) -> None:
    print(run(set_retention(load_settings(), args.slug, args.days)))  # noqa: T201


def cmd_tenant_erase_subject(args: argparse.Namespace) -> None:
    print(run(erase_subject(load_settings(), args.slug, args.tag)))  # noqa: T201


def _kek(settings: Settings, encoded: str | None = None) -> AESGCM:
    key = encoded if encoded is not None else sealing.kek_of(settings)
    if key is None:
        raise CliError("set OUTLIVE_ENCRYPTION_KEY (32 bytes, base64) first", 2)
    try:
        return sealing.deployment_key(key) if isinstance(key, str) else key
    except BadUserInput as exc:
        raise CliError(str(exc), 2) from None


async def encrypt(settings: Settings, slug: str) -> str:
    kek = _kek(settings)
    async with open_runtime(settings, "cli") as runtime:
        if not await sealing.enable(runtime.sessions, kek, slug):
            raise CliError(f"no tenant {slug!r}", 2)
    return f"{slug}: payloads are sealed from now on"


async def rewrap(settings: Settings, old_key: str) -> str:
    new, old = _kek(settings), _kek(settings, old_key)
    async with open_runtime(settings, "cli") as runtime:
        done, skipped = await sealing.rewrap(runtime.sessions, old, new)
    return f"{done} data key(s) re-wrapped by the new deployment key; {skipped} not by the old one"


def cmd_tenant_encrypt(args: argparse.Namespace) -> None:
    print(run(encrypt(load_settings(), args.slug)))  # noqa: T201


def cmd_tenant_rewrap(args: argparse.Namespace) -> None:
    print(run(rewrap(load_settings(), args.old_key)))  # noqa: T201
