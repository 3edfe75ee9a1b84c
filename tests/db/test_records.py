"""`Record.from_row`: every record type reads its columns by name, converted by its annotation."""

from __future__ import annotations

import dataclasses
import enum
import typing
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

import outlive.jobs.redrive
import outlive.services.invitations
import outlive.services.replays
import outlive.services.tokens
import outlive.services.webhooks
from outlive.db.models import RunStatus
from outlive.db.records import Record
from outlive.services.runs.records import RunRecord, to_record


class Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True, slots=True)
class Sample(Record):
    color: Color
    maybe: Color | None
    colors: list[Color]
    names: list[str]
    tags: tuple[str, ...]
    data: dict[str, Any]
    count: int = 7


def test_a_row_is_converted_by_the_record_s_annotations() -> None:
    row = {
        "color": "red",
        "maybe": None,
        "colors": ["blue", "red"],
        "names": ("a", "b"),
        "tags": None,
        "data": {"x": 1},
        "ignored": "a column the record does not have",
    }
    sample = Sample.from_row(row)
    assert sample == Sample(Color.RED, None, [Color.BLUE, Color.RED], ["a", "b"], (), {"x": 1})
    assert type(sample.color) is Color
    assert type(sample.names) is list
    assert Sample.from_row({**row, "maybe": "blue", "count": 3, "tags": ["t"]}) == Sample(
        Color.RED, Color.BLUE, [Color.BLUE, Color.RED], ["a", "b"], ("t",), {"x": 1}, 3
    )


def test_a_column_without_a_default_must_be_there() -> None:
    with pytest.raises(KeyError, match="color"):
        Sample.from_row({"maybe": None})


def test_a_run_row_becomes_its_record() -> None:
    now = datetime.now(UTC)
    row: dict[str, Any] = {f.name: None for f in dataclasses.fields(RunRecord)}
    del row["depth"], row["key"]  # absent columns take the field's default
    row.update(id=uuid4(), tenant_id=uuid4(), agent="a", status="RUNNING", attempt=2, input={})
    row.update(created_at=now, updated_at=now, event_seq=3, lost_attempts=0, step_seq=1)
    row.update(resumes=0, children_settled=0, tags=["x", "y"])
    run = to_record(row)
    assert run.status is RunStatus.RUNNING
    assert run.tags == ("x", "y")
    assert (run.depth, run.key, run.attempt, run.event_seq) == (0, "", 2, 3)


@pytest.mark.parametrize(
    "record",
    [
        outlive.services.tokens.TokenRecord,
        outlive.services.replays.ReplayRecord,
        outlive.services.invitations.InvitationRecord,
        outlive.services.webhooks.EndpointRecord,
        outlive.services.webhooks.DeliveryRecord,
        outlive.jobs.redrive.RejectedRecord,
    ],
)
def test_every_record_type_reads_its_own_columns(record: type[Record]) -> None:
    """Each field is read from the column of its name, an enum converted to its member."""
    hints = typing.get_type_hints(record)
    row = {name: _value_for(hint) for name, hint in hints.items()}
    built = record.from_row(row)
    for name, hint in hints.items():
        value = getattr(built, name)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            assert value is next(iter(hint))
        elif typing.get_args(hint) and _enum_of(typing.get_args(hint)[0]) is not None:
            assert value == [next(iter(typing.get_args(hint)[0]))]
        else:
            assert value == row[name], name


def _enum_of(hint: Any) -> type[enum.Enum] | None:
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


def _value_for(hint: Any) -> Any:
    if (kind := _enum_of(hint)) is not None:
        return next(iter(kind)).value
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list:
        kind = _enum_of(args[0])
        return [next(iter(kind)).value] if kind is not None else ["an item"]
    return f"a value of {hint}"
