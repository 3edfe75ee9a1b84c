"""Hypothesis strategies for the fuzzer: GraphQL documents and variables drawn from the served
schema (graphql-core's types), HTTP bodies and methods, and WebSocket frames.

Documents are mostly well-formed (so that they reach validation, the limits, the plans and the
resolvers), with wrong-typed variables, unknown fields and corrupted text mixed in."""

from __future__ import annotations

import json
from typing import Any

from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLUnionType,
    get_named_type,
)
from hypothesis import strategies as st

MAX_DEPTH = 3
# Text a JSON encoder can write (no lone surrogates), NUL included: refused as input, not a crash.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
JSON_LEAF = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXT
JSON_LEAF |= st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
NAMES = st.from_regex(r"[_A-Za-z][_0-9A-Za-z]{0,10}", fullmatch=True)


def _scalar(draw: st.DrawFn, scalar: GraphQLScalarType) -> Any:
    name = scalar.name
    if name == "Int":
        return draw(st.integers(-3, 120) | st.sampled_from([0, 1, 2**31, -(2**31) - 1]))
    if name == "Float":
        return draw(st.floats(-10, 1000, allow_nan=False) | st.integers(0, 50))
    if name == "Boolean":
        return draw(st.booleans())
    if name == "ID":
        return draw(st.uuids().map(str) | TEXT)
    if name == "DateTime":
        return draw(st.datetimes().map(lambda d: d.isoformat() + "Z") | TEXT)
    if name == "String":
        return draw(TEXT | st.sampled_from(["demo", "http://127.0.0.1:9/hook", "a@b.example"]))
    return draw(JSON_VALUE)  # JSON and any other custom scalar


def input_value(draw: st.DrawFn, type_: GraphQLInputType, depth: int = 0) -> Any:
    """A value for `type_`, right most of the time; wrong (any JSON) now and then."""
    if draw(st.integers(0, 39)) == 0:
        return draw(JSON_VALUE)
    if isinstance(type_, GraphQLNonNull):
        return input_value(draw, type_.of_type, depth)
    if draw(st.integers(0, 9)) == 0:
        return None
    if isinstance(type_, GraphQLList):
        return [input_value(draw, type_.of_type, depth + 1) for _ in range(draw(st.integers(0, 2)))]
    if isinstance(type_, GraphQLEnumType):
        return draw(st.sampled_from(sorted(type_.values)))
    if isinstance(type_, GraphQLScalarType):
        return _scalar(draw, type_)
    assert isinstance(type_, GraphQLInputObjectType)
    value: dict[str, Any] = {}
    for name, field in type_.fields.items():
        required = isinstance(field.type, GraphQLNonNull)
        if depth < MAX_DEPTH and (required or draw(st.booleans())):
            value[name] = input_value(draw, field.type, depth + 1)
    return value


class _Document:
    def __init__(self) -> None:
        self.definitions: list[str] = []
        self.variables: dict[str, Any] = {}


def _selection(
    draw: st.DrawFn, schema: GraphQLSchema, type_: GraphQLNamedType, doc: _Document, depth: int
) -> str:
    if isinstance(type_, GraphQLUnionType):
        parts = [f"... on {t.name} {_selection(draw, schema, t, doc, depth)}" for t in type_.types]
        return "{ __typename " + " ".join(parts) + " }"
    assert isinstance(type_, GraphQLObjectType | GraphQLInterfaceType)
    names = sorted(type_.fields)
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    parts = []
    for name in chosen:
        part = _field(draw, schema, name, type_.fields[name], doc, depth)
        if part is not None:
            parts.append(part)
    if draw(st.integers(0, 29)) == 0:
        parts.append(draw(NAMES))  # a field that may not exist
    return "{ " + (" ".join(parts) or "__typename") + " }"


def _field(
    draw: st.DrawFn,
    schema: GraphQLSchema,
    name: str,
    field: GraphQLField,
    doc: _Document,
    depth: int,
) -> str | None:
    named = get_named_type(field.type)
    composite = isinstance(named, GraphQLObjectType | GraphQLInterfaceType | GraphQLUnionType)
    if composite and depth >= MAX_DEPTH:
        return None
    args = []
    for arg_name, arg in field.args.items():
        if not isinstance(arg.type, GraphQLNonNull) and not draw(st.booleans()):
            continue
        variable = f"v{len(doc.variables)}"
        doc.definitions.append(f"${variable}: {arg.type}")
        doc.variables[variable] = input_value(draw, arg.type)
        args.append(f"{arg_name}: ${variable}")
    alias = f"{draw(NAMES)}: " if draw(st.integers(0, 5)) == 0 else ""
    text = alias + name + (f"({', '.join(args)})" if args else "")
    if composite:
        text += " " + _selection(draw, schema, named, doc, depth + 1)
    return text


@st.composite
def operations(draw: st.DrawFn, schema: GraphQLSchema) -> tuple[str, dict[str, Any]]:
    """(document, variables): an operation of the schema, sometimes corrupted."""
    weighted = ["query"] * 6 + ["mutation"] * 3 + ["subscription"]
    kind = draw(st.sampled_from(weighted))
    root = {
        "query": schema.query_type,
        "mutation": schema.mutation_type,
        "subscription": schema.subscription_type,
    }[kind]
    doc = _Document()
    assert root is not None
    body = _selection(draw, schema, root, doc, 0)
    name = f" {draw(NAMES)}" if draw(st.booleans()) else ""
    head = f"{kind}{name}" + (f"({', '.join(doc.definitions)})" if doc.definitions else "")
    text = f"{head} {body}"
    corruption = draw(st.integers(0, 19))
    if corruption == 0:  # cut short
        text = text[: draw(st.integers(0, len(text)))]
    elif corruption == 1:  # a character inserted
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(list('{}()$:!@#"\\[]'))) + text[at:]
    return text, doc.variables


HTTP_METHODS = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
BODY_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "query": TEXT | JSON_VALUE | st.just("{ agents { name } }"),
        "variables": JSON_VALUE,
        "operationName": TEXT | JSON_VALUE,
        "extensions": JSON_VALUE
        | st.builds(
            lambda h, v: {"persistedQuery": {"version": v, "sha256Hash": h}},
            st.text("0123456789abcdef", min_size=0, max_size=64),
            JSON_LEAF,
        ),
    },
)
BODIES = (
    JSON_VALUE.map(lambda v: json.dumps(v).encode())
    | BODY_FIELDS.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=64)
)
CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "text/plain", "", "multipart/form-data"]
)

FRAME_TYPES = st.sampled_from(
    ["connection_init", "ping", "pong", "subscribe", "complete", "next", "error", "nope"]
)
FRAMES = (
    JSON_VALUE.map(json.dumps)
    | st.fixed_dictionaries(
        {"type": FRAME_TYPES},
        optional={"id": TEXT | JSON_VALUE, "payload": JSON_VALUE | BODY_FIELDS},
    ).map(json.dumps)
    | st.binary(max_size=32)
    | TEXT
)
