"""The values settings are made of: rates, model prices, the built-in agents' names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_settings import NoDecode

BUILTIN_AGENTS = ("demo", "llm")  # the package's own agents (`OUTLIVE_BUILTIN_AGENTS`)


class ModelPrice(BaseModel):
    """USD per million tokens (`OUTLIVE_MODEL_PRICES`)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)


@dataclass(frozen=True, slots=True)
class Rate:
    """A token bucket: at most `count` at once, refilled at `count` per `per_s` seconds."""

    count: int
    per_s: float

    @classmethod
    def parse(cls, value: object) -> object:
        """`"N/S"` (N per S seconds); `"off"` (or 0) means no limit (None)."""
        if not isinstance(value, str):
            return value
        text = value.strip().lower()
        if text in ("off", "0", "none", ""):
            return None
        count, sep, per = text.partition("/")
        try:
            rate = cls(int(count), float(per) if sep else 1.0)
        except ValueError:
            msg = f"{value!r} is not a rate: write N/S (N per S seconds), or off"
            raise ValueError(msg) from None
        if rate.count < 1 or rate.per_s <= 0:
            raise ValueError(f"{value!r}: N must be at least 1 and S positive")
        return rate

    def __str__(self) -> str:
        return f"{self.count}/{self.per_s:g}"


RateSetting = Annotated[Rate | None, NoDecode, BeforeValidator(Rate.parse)]


DEFAULT_CELL = "default"  # the cell whose queues and keys keep their names (docs/cells.md)


def of_cell(name: str, cell: str | None) -> str:
    """A queue's name, or a Redis key, of `cell`: the default cell's (and a deployment without
    a directory's) is `name` itself, another's `name@cell`. Each cell has its own queues and
    bookkeeping keys on the shared Redis, so a worker serves exactly the cells it is given."""
    return name if cell is None or cell == DEFAULT_CELL else f"{name}@{cell}"
