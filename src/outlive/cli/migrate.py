"""`outlive migrate`: Alembic upgrade to head (alembic.ini in the source checkout)."""

from __future__ import annotations

import argparse
from pathlib import Path

from outlive.cli.common import CliError, load_settings

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def migrate(database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    ini = PROJECT_ROOT / "alembic.ini"
    if not ini.is_file():
        raise CliError(f"alembic.ini not found at {ini}: run outlive from its source checkout")
    config = Config(str(ini))
    config.attributes["database_url"] = database_url
    command.upgrade(config, "head")


def cmd_migrate(_: argparse.Namespace) -> None:
    settings = load_settings()
    if not settings.database_url:
        raise CliError("DATABASE_URL is not set", 1)
    migrate(settings.database_url)
    print("migrated to head")  # noqa: T201
