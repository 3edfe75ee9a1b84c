"""The client's types against the served schema (`outlive schema`): every document it sends
validates, and every option of the inputs it takes (`startRun`, `signalRun`, `runs`) is a
parameter of its method, so a field the schema gains or loses fails here first."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from graphql import GraphQLInputObjectType, GraphQLSchema, build_schema, parse, validate
from pydantic.alias_generators import to_camel

from outlive.client import OutliveClient, types
from outlive.client import operations as ops
from outlive.resolvers.schema import build_schema as served_schema


@pytest.fixture(scope="module")
def schema() -> GraphQLSchema:
    return build_schema(served_schema().as_str())  # what `outlive schema` prints


@pytest.mark.parametrize("name", sorted(ops.ALL))
def test_every_document_validates_against_the_served_schema(
    schema: GraphQLSchema, name: str
) -> None:
    errors = validate(schema, parse(ops.ALL[name]))
    assert not errors, [e.message for e in errors]


def _parameters(method: Callable[..., Any], skip: int) -> set[str]:
    names = list(inspect.signature(method).parameters)[skip:]
    return {to_camel(n) for n in names}


def test_start_run_and_signal_run_take_every_field_of_their_inputs(schema: GraphQLSchema) -> None:
    start = schema.get_type("StartRunInput")
    signal = schema.get_type("SignalRunInput")
    assert isinstance(start, GraphQLInputObjectType)
    assert isinstance(signal, GraphQLInputObjectType)

    assert _parameters(OutliveClient.start_run, 1) == set(start.fields)
    assert _parameters(OutliveClient.signal_run, 2) | {"id"} == set(signal.fields)


def test_runs_takes_every_argument_of_the_runs_query(schema: GraphQLSchema) -> None:
    assert schema.query_type is not None
    arguments = schema.query_type.fields["runs"].args
    assert _parameters(OutliveClient.runs, 1) == set(arguments)


@pytest.mark.parametrize(
    ("enum", "name"),
    [
        (types.RunStatus, "RunStatus"),
        (types.RunConflict, "RunConflict"),
        (types.RunOrder, "RunOrder"),
    ],
)
def test_the_enums_are_the_schemas(schema: GraphQLSchema, enum: Any, name: str) -> None:
    served = schema.get_type(name)
    assert {e.value for e in enum} == set(served.values)  # type: ignore[union-attr]
