"""What every command shares: its one-line error, its settings, its argument types."""

from __future__ import annotations

import argparse
from collections.abc import Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from outlive.ids import SLOTS

if TYPE_CHECKING:  # `outlive --help` parses without loading pydantic (tests/test_cold_start.py)
    from outlive.config import Settings

T = TypeVar("T")


class CliError(Exception):
    """A command's failure: one line on stderr and exit `status` (2 bad input, 1 a service)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def load_settings(**overrides: Any) -> Settings:
    from outlive.config import Settings

    try:
        return Settings(**overrides)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise CliError(" ".join(line.strip() for line in first[1:3]) or str(exc), 2) from None


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    import asyncio

    return asyncio.run(coroutine)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(value: str) -> timedelta:
    """`90m`, `12h`, `30d`, `45s` or plain seconds."""
    text = value.strip().lower()
    unit = _UNITS.get(text[-1:])
    number = text[:-1] if unit is not None else text
    try:
        amount = float(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration (90m, 12h, 30d)") from None
    if not 0 < amount <= 100 * 365 * 86400:
        raise argparse.ArgumentTypeError("must be positive (and under a century)")
    return timedelta(seconds=amount)


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


KEEP = object()  # a limit left as it is (argparse applies `type` to string defaults only)


def limit(value: str) -> int | None:
    """A tenant's cap: a number, or `default` for the deployment's."""
    if value == "default":
        return None
    number = positive(value)
    if number > 2**31 - 1:  # the column is a PostgreSQL integer
        raise argparse.ArgumentTypeError(f"must be at most {2**31 - 1}")
    return number


def slot_range(value: str) -> range:
    """`512-1023` (or one slot): parsed without importing the directory, so `--help` stays light."""
    first, _, last = value.partition("-")
    try:
        slots = range(int(first), int(last or first) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a slot range (e.g. 512-1023)") from None
    if not slots or slots.start < 0 or slots.stop > SLOTS:
        raise argparse.ArgumentTypeError(f"slots are 0 to {SLOTS - 1}")
    return slots
