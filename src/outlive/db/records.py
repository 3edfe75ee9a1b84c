"""Records from rows: each record type declares its fields once, and `Record.from_row` reads them.

A service hands out frozen dataclasses (`RunRecord`, `DeliveryRecord`, …) built from result
rows by column name. Rather than a mapper per type that copies each field by hand, a record
inherits `Record` and is built with `XRecord.from_row(row)`: each field is read from the column
of its name, converted by its declared type, and a field with a default may be absent from the
row. The conversions follow the annotation:

- an `Enum` (or `Enum | None`): `Status(value)` (None stays None);
- `list[E]` of an `Enum`: each item converted; any other `list[...]`: a list of the value;
- `tuple[...]`: a tuple of the value (None: empty);
- anything else (NewType ids, datetimes, JSON): the value as it is.

The plan (which column, which conversion) is made once per type, into one generated function
as fast as the hand-written copy it replaces. A record whose fields are not its columns (a
rename, a value computed from two) keeps a function of its own.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Self

_MISSING = dataclasses.MISSING
Convert = Callable[[Any], Any]
_BUILDERS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}  # one per record type


class Record:
    """The base of a record read from a row (a frozen dataclass of its columns)."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        """The record of `row`, by column name (see the module's docstring)."""
        build = _BUILDERS.get(cls)
        if build is None:
            build = _BUILDERS[cls] = _builder(cls)
        return build(row)  # type: ignore[no-any-return]  # built for `cls`


def _builder(cls: type[Record]) -> Callable[[Mapping[str, Any]], Any]:
    """One function per record type: `cls(name=convert(row[name]), …)`, with `row.get(name,
    default)` for a field with a default."""
    hints = typing.get_type_hints(cls)
    plan: list[tuple[str, bool, Any, Convert | None]] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]  # a dataclass subclass
        default = field.default
        if default is _MISSING and field.default_factory is not _MISSING:
            default = field.default_factory()
        plan.append((field.name, default is _MISSING, default, _conversion(hints[field.name])))

    # Generated once, as `dataclasses` does for `__init__`: the fields are identifiers, and the
    # defaults and conversions are passed by name, never written into the source.
    scope: dict[str, Any] = {"cls": cls}
    args = []
    for i, (name, required, default, convert) in enumerate(plan):
        value = f"row[{name!r}]" if required else f"row.get({name!r}, d{i})"
        scope[f"d{i}"], scope[f"c{i}"] = default, convert
        args.append(f"{name}={value if convert is None else f'c{i}({value})'}")
    exec(f"def build(row):\n    return cls({', '.join(args)})\n", scope)  # noqa: S102 (see above)
    return scope["build"]  # type: ignore[no-any-return]  # the function just defined


def _conversion(hint: Any) -> Convert | None:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        convert = _conversion(inner[0]) if len(inner) == 1 else None
        if convert is None:
            return None
        return lambda value: None if value is None else convert(value)
    if origin is list:
        item = args[0] if args else Any
        if isinstance(item, type) and issubclass(item, enum.Enum):
            return lambda value: [item(v) for v in value]
        return list
    if origin is tuple:
        return lambda value: tuple(value or ())
    return None
