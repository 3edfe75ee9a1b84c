"""`outlive tenant set-retention SLUG DAYS` and `outlive tenant erase-subject SLUG TAG` (contract
§1): as setRetention / eraseSubject, for operators; the second prints the receipt and records
the erasure as done by `cli`. Called in-process (the parser is argparse's)."""

from __future__ import annotations

import uuid

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from outlive.cli.common import CliError
from outlive.cli.governance import encrypt, erase_subject, rewrap, set_retention
from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services import retention, sealing
from tests.support import TenantHandle


async def test_set_retention_sets_the_tenants_days(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    slug = tenant.principal.tenant.slug
    assert await set_retention(settings, slug, 9) == f"{slug}: settled runs are kept 9 day(s)"
    assert await retention.retention_of(sessions, tenant.id, 30) == 9
    with pytest.raises(CliError) as bad:
        await set_retention(settings, slug, 0)
    assert bad.value.status == 2
    with pytest.raises(CliError, match="no tenant"):
        await set_retention(settings, "no-such-tenant-here", 9)


async def test_erase_subject_prints_the_receipt_and_is_recorded(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    slug, tag = tenant.principal.tenant.slug, f"user:{uuid.uuid4().hex[:10]}"
    async with sessions.unit() as uow:
        await uow.execute(
            text(
                "INSERT INTO runs (tenant_id, agent, status, input, tags, finished_at)"
                " VALUES (:t, 'demo', 'SUCCEEDED', '{}', ARRAY[:tag], now())"
            ),
            t=tenant.id,
            tag=tag,
        )
    printed = await erase_subject(settings, slug, tag)
    lines = printed.splitlines()
    assert lines[0].startswith(f"{slug}: erased tag {tag!r} at ")
    assert lines[1:] == ["runs: 1", "steps: 0", "events: 0", "signals: 0", "deliveries: 0",
                         "blobs: 0"]  # fmt: skip
    again = (await erase_subject(settings, slug, tag)).splitlines()
    assert again[1] == "runs: 0"
    rows = await sessions.all(
        text("SELECT by, runs FROM erasures WHERE tenant_id = :t ORDER BY at"), t=tenant.id
    )
    assert [(r["by"], r["runs"]) for r in rows] == [("cli", 1), ("cli", 0)]
    with pytest.raises(CliError) as bad:
        await erase_subject(settings, slug, "not a tag")
    assert bad.value.status == 2


async def test_encrypt_and_rewrap_need_the_deployment_key(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    slug = tenant.principal.tenant.slug
    with pytest.raises(CliError, match="OUTLIVE_ENCRYPTION_KEY") as unset:
        await encrypt(settings.model_copy(update={"encryption_key": None}), slug)
    assert unset.value.status == 2
    old, new = sealing.new_deployment_key(), sealing.new_deployment_key()
    keyed = settings.model_copy(update={"encryption_key": SecretStr(old)})
    assert await encrypt(keyed, slug) == f"{slug}: payloads are sealed from now on"
    with pytest.raises(CliError, match="no tenant"):
        await encrypt(keyed, "no-such-tenant-here")
    rotated = settings.model_copy(update={"encryption_key": SecretStr(new)})
    assert (await rewrap(rotated, old)).startswith("1 data key(s) re-wrapped")
    assert await sealing.cipher_of(sessions, sealing.deployment_key(new), tenant.id) is not None
