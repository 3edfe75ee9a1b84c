"""Migrate a scratch database to head and run `alembic check` against it (models == migrations)."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys

import asyncpg

from outlive.urls import PostgresUrl

ADMIN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def sql(statement: str) -> None:
    conn = await asyncpg.connect(ADMIN)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def main() -> int:
    name = f"outlive_ci_check_{secrets.token_hex(4)}"
    url = str(PostgresUrl.parse(ADMIN).with_database(name))  # one host or several
    asyncio.run(sql(f'CREATE DATABASE "{name}"'))
    try:
        env = {**os.environ, "DATABASE_URL": url}
        for command in (["outlive", "migrate"], ["alembic", "check"]):
            done = subprocess.run(command, env=env, check=False)  # noqa: S603
            if done.returncode:
                return done.returncode
        return 0
    finally:
        asyncio.run(sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    sys.exit(main())
