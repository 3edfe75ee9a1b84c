"""A full-table text scan of the test database: how many rows of any table mention a string
(as text, or as the hex of its bytes, which is how a bytea column reads as text). The
equivalent of grepping a `pg_dump`, without needing a pg_dump of the server's version."""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.tx import Sessions

_TABLES = text(
    "SELECT quote_ident(table_name) AS name FROM information_schema.tables"
    " WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
)


async def mentions(sessions: Sessions, marker: str) -> dict[str, int]:
    """Each table whose rows mention `marker`, with how many rows do."""
    hexed = marker.encode().hex()
    found: dict[str, int] = {}
    async with sessions.unit() as uow:
        for row in await uow.all(_TABLES):
            name = row["name"]
            counted = await uow.one(
                text(
                    f"SELECT count(*) AS n FROM {name} x"  # noqa: S608 (catalog names, quoted)
                    " WHERE strpos(x::text, :marker) > 0 OR strpos(x::text, :hexed) > 0"
                ),
                marker=marker,
                hexed=hexed,
            )
            if counted is not None and counted["n"]:
                found[name] = int(counted["n"])
    return found
