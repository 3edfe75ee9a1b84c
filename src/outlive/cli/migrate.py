"""`outlive migrate`: Alembic upgrade to head (alembic.ini in the source checkout), on a
connection of the "cli" runtime, so that `OUTLIVE_DB_PGBOUNCER` holds for it too."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from outlive.cli.common import CliError, load_settings, run
from outlive.config import Settings

PROJECT_ROOT = Path(__file__).resolve().parents[3]


async def upgrade(settings: Settings) -> None:
    from alembic import command
    from alembic.config import Config

    from outlive.runtime import open_runtime

    ini = PROJECT_ROOT / "alembic.ini"
    if not ini.is_file():
        raise CliError(f"alembic.ini not found at {ini}: run outlive from its source checkout")
    config = Config(str(ini))

    def upgrade_on(connection: Any) -> None:
        config.attributes["connection"] = connection  # env.py migrates in this transaction
        command.upgrade(config, "head")

    async with open_runtime(settings, "cli") as runtime, runtime.engine.begin() as connection:
        await connection.run_sync(upgrade_on)


def migrate(database_url: str) -> None:
    """Upgrade the database at `database_url` to head (the test suite's databases)."""
    asyncio.run(upgrade(Settings(database_url=database_url)))


def cmd_migrate(_: argparse.Namespace) -> None:
    run(upgrade(load_settings()))
    print("migrated to head")  # noqa: T201
