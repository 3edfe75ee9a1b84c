"""Every `outlive` command that touches the database works behind PgBouncer in transaction mode
with `OUTLIVE_DB_PGBOUNCER=1`: each goes through the one runtime, which turns named prepared
statements off. (A command that built its own engine without the setting left
`__asyncpg_stmt_1__` prepared on a server connection, and the next process to get that connection
failed with "prepared statement ... already exists".)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from outlive.config import Settings

pytestmark = pytest.mark.timeout(240)


def outlive(settings: Settings, *args: str) -> str:
    """Run the command through PgBouncer; its stdout, after checking it succeeded."""
    assert settings.database_url is not None
    assert settings.redis_url is not None
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url,
        "REDIS_URL": settings.redis_url,
        "OUTLIVE_DB_PGBOUNCER": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "outlive.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"outlive {' '.join(args)}: {done.stderr}"
    assert "prepared statement" not in done.stderr
    return done.stdout


def test_every_database_command_works_behind_pgbouncer(bounced: Settings) -> None:
    slug = f"pgb-{uuid.uuid4().hex[:8]}"
    assert "migrated to head" in outlive(bounced, "migrate")
    tokens = [
        outlive(bounced, "token", "create", "--tenant", slug, "--email", f"{who}@{slug}.test")
        for who in ("ops", "dev", "ci")
    ]
    assert all(t.strip().splitlines()[-1].startswith("olv_") for t in tokens)
    header, *rows = outlive(bounced, "token", "list", "--tenant", slug).strip().splitlines()
    assert header.split("\t")[0] == "id"
    assert len(rows) == 3
    limits = outlive(bounced, "tenant", "set-limits", "--tenant", slug, "--max-running-runs", "2")
    assert f"{slug}: max-running-runs 2" in limits
    revoked = outlive(bounced, "token", "revoke", rows[0].split("\t")[0])
    assert revoked.startswith("revoked token")
    outlive(bounced, "jobs", "rejected")
    outlive(bounced, "jobs", "redrive", "--all")
    report = json.loads(outlive(bounced, "cron", "run", "*/10 * * * *").strip().splitlines()[-1])
    assert report["failed"] == {}
    assert report["ran"] == ["expire_invitations"]
