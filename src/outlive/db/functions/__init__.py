"""The PL/pgSQL functions, one `<name>.sql` each: the source of truth for what is live.

Migrations never load these files: each migration carries a frozen copy of the text it installs
(so replaying history always installs what it installed then). Changing a function is two
edits: its `.sql` file here, and a new migration whose frozen copy is the new text.
`tests/db/test_functions.py` fails while the migrated database and these files disagree.
"""

from __future__ import annotations

from importlib.resources import files


def names() -> list[str]:
    """Every function with a source file here, sorted."""
    return sorted(
        entry.name.removesuffix(".sql")
        for entry in files(__package__).iterdir()
        if entry.name.endswith(".sql")
    )


def source(name: str) -> str:
    """The `CREATE OR REPLACE FUNCTION` statement of `name`."""
    return files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")
