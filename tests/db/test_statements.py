"""Every prepared statement compiles and PostgreSQL accepts it against the migrated schema.

`outlive.db.raw.prepare` compiles a statement the first time it runs, not at import: a statement
that no other test runs would otherwise show a typo, a renamed column or a bind parameter
spelled two ways only in production. Here every module of the package is imported, every
`Statement` it holds at module level (alone, or in a dict, tuple or list) is compiled, and
PostgreSQL prepares its text on the test database (parsed and planned, not executed).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from typing import Any

import asyncpg

import outlive
from outlive.db.raw import Statement
from outlive.urls import PostgresUrl
from tests.support import Servers


def _held(value: Any) -> Iterator[Statement]:
    if isinstance(value, Statement):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _held(item)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _held(item)


def every_statement() -> dict[int, tuple[str, Statement]]:
    """Each module-level statement once, by identity, with where it was found."""
    found: dict[int, tuple[str, Statement]] = {}
    for info in pkgutil.walk_packages(outlive.__path__, "outlive."):
        if info.name.endswith(".__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        for attribute, value in vars(module).items():
            for statement in _held(value):
                found.setdefault(id(statement), (f"{info.name}.{attribute}", statement))
    return found


async def test_every_statement_prepares_on_the_schema(servers: Servers) -> None:
    statements = every_statement()
    assert len(statements) > 150  # the hot path's, the pages', the relay's, the holds'...
    conn = await asyncpg.connect(str(PostgresUrl.parse(servers.database_url)))
    try:
        for where, statement in statements.values():
            placeholders = {int(n) for n in re.findall(r"\$(\d+)", statement.sql)}
            assert placeholders == set(range(1, len(statement.names) + 1)), where
            try:
                await conn.prepare(statement.sql)
            except asyncpg.PostgresError as error:
                raise AssertionError(f"{where}: {error}") from error
    finally:
        await conn.close()
