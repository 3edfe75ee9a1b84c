"""Compiled plans: an operation whose fields below the root are plain data, answered without
graphql-core's executor.

A profile of `runs(first: 50)` under load showed ~60% of the API's CPU in graphql-core's
per-field machinery (execute_field, complete_value, building a resolve info per field), for
fields that only read an attribute of a dataclass. A `Plan` is built once per document and
operation: the root fields keep their strawberry resolvers (called with the same arguments and
the same `Info` strawberry builds), and everything below them is completed by closures made from
the schema's own types: `getattr` for each field, the type's own `serialize` for each leaf,
`__typename` as a constant. The answer is the same JSON strawberry gives (the tests compare
them on every document of the web app).

Only the simple case is compiled (`compile_plan` returns None otherwise, and graphql-core
executes as usual): no directives; below the root only fields without resolvers or arguments, no
repeated response keys; no introspection. Variables arrive coerced (`http.py` coerces them once,
for either route).

Each root resolver gets graphql-core's own `GraphQLResolveInfo`, built by keyword in `_info`, the
same class graphql-core's executor gives the resolvers of the other route (strawberry wraps it in
its `Info` either way). Its fields are checked against the installed graphql-core at import, so an
upgrade that changes them fails loudly here rather than in a resolver.

Errors: a root resolver that raises is reported as graphql-core reports it (its path, null data
for a non-null root). A completion that fails (a null in a non-null position, a value a scalar
cannot serialize: a bug, never user input) raises `Unplanned`: a query is then executed again by
graphql-core, which reports it precisely; a mutation's field is reported as an internal error.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    located_error,
)
from graphql.execution.values import VariableValues, get_argument_values
from graphql.pyutils import Path, is_awaitable
from graphql.type.definition import GraphQLResolveInfo, GraphQLResolveInfoHelpers

Complete = Callable[[Any], Any]


class Unplanned(Exception):
    """The plan cannot answer this (a failed completion): graphql-core executes it."""


_INFO_FIELDS = (
    "field_name",
    "field_nodes",
    "return_type",
    "parent_type",
    "path",
    "schema",
    "fragments",
    "root_value",
    "operation",
    "variable_values",
    "context",
    "is_awaitable",
    "abort_signal",
    "async_helpers",
)
if GraphQLResolveInfo._fields != _INFO_FIELDS:  # pragma: no cover (a graphql-core upgrade)
    raise ImportError(f"GraphQLResolveInfo changed: {GraphQLResolveInfo._fields}")


async def _gather(values: Any) -> list[Any]:
    return list(await asyncio.gather(*values))


def _track(values: Any) -> None:
    raise NotImplementedError("a compiled plan's resolvers track no background work")


_HELPERS = GraphQLResolveInfoHelpers(gather=_gather, track=_track)


class _Unsupported(Exception):
    """The document is not the simple case: strawberry executes it."""


@dataclass(frozen=True, slots=True)
class RootField:
    key: str
    node: FieldNode
    field: GraphQLField
    complete: Complete
    non_null: bool


@dataclass(frozen=True, slots=True)
class Plan:
    schema: GraphQLSchema
    operation: OperationDefinitionNode
    fragments: Mapping[str, FragmentDefinitionNode]
    parent: GraphQLObjectType
    roots: tuple[RootField, ...]

    async def run(
        self, coerced: VariableValues, context: Any
    ) -> tuple[dict[str, Any] | None, list[GraphQLError]]:
        """(data, errors) as graphql-core would give them; raises `Unplanned`."""
        errors: list[GraphQLError] = []
        if self.operation.operation is OperationType.MUTATION:
            values = [await self._resolve(r, coerced, context, errors) for r in self.roots]
        else:
            values = list(
                await asyncio.gather(
                    *(self._resolve(r, coerced, context, errors) for r in self.roots)
                )
            )
        data: dict[str, Any] = {}
        for root, value in zip(self.roots, values, strict=True):
            if value is None and root.non_null:
                return None, errors
            data[root.key] = value
        return data, errors

    async def _resolve(
        self, root: RootField, coerced: VariableValues, context: Any, errors: list[GraphQLError]
    ) -> Any:
        path = Path(None, root.key, self.parent.name)
        info = self._info(root, path, coerced, context)
        try:
            args = get_argument_values(root.field, root.node, coerced)
            resolve = root.field.resolve
            assert resolve is not None  # noqa: S101 (compile_plan checked it)
            value = resolve(None, info, **args)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 (reported like graphql-core reports it)
            errors.append(located_error(exc, [root.node], path.as_list()))
            return None
        try:
            return None if value is None else root.complete(value)
        except Exception as exc:
            if self.operation.operation is not OperationType.MUTATION:
                raise Unplanned("completion") from exc
            errors.append(located_error(exc, [root.node], path.as_list()))
            return None

    def _info(
        self, root: RootField, path: Path, coerced: VariableValues, context: Any
    ) -> GraphQLResolveInfo[Any]:
        """What graphql-core's executor gives a root resolver, by keyword (see the docstring)."""
        return GraphQLResolveInfo(
            field_name=root.node.name.value,
            field_nodes=[root.node],
            return_type=root.field.type,
            parent_type=self.parent,
            path=path,
            schema=self.schema,
            fragments=dict(self.fragments),
            root_value=None,
            operation=self.operation,
            variable_values=coerced,
            context=context,
            is_awaitable=is_awaitable,
            abort_signal=None,
            async_helpers=_HELPERS,
        )


def compile_plan(
    schema: GraphQLSchema,
    operation: OperationDefinitionNode,
    fragments: Mapping[str, FragmentDefinitionNode],
) -> Plan | None:
    parent = schema.get_root_type(operation.operation)
    if parent is None or operation.directives:
        return None
    try:
        roots = []
        for key, node in _fields(operation.selection_set, fragments).items():
            if node.name.value == "__typename":
                return None  # rare at the root; strawberry answers it
            field = parent.fields.get(node.name.value)
            if field is None or field.resolve is None:
                return None
            roots.append(
                RootField(
                    key,
                    node,
                    field,
                    _completer(field.type, node.selection_set, fragments),
                    isinstance(field.type, GraphQLNonNull),
                )
            )
    except _Unsupported:
        return None
    return Plan(schema, operation, fragments, parent, tuple(roots))


def _fields(
    selection_set: SelectionSetNode | None, fragments: Mapping[str, FragmentDefinitionNode]
) -> dict[str, FieldNode]:
    """The fields of a selection set by response key, fragments spread (the schema has no
    interfaces or unions, so every fragment applies)."""
    found: dict[str, FieldNode] = {}
    for node in selection_set.selections if selection_set is not None else ():
        if node.directives:
            raise _Unsupported("directives")
        if isinstance(node, FieldNode):
            key = (node.alias or node.name).value
            if key in found:
                raise _Unsupported("a repeated response key")
            found[key] = node
            continue
        if isinstance(node, InlineFragmentNode):
            inner = node.selection_set
        elif isinstance(node, FragmentSpreadNode) and node.name.value in fragments:
            inner = fragments[node.name.value].selection_set
        else:
            raise _Unsupported("an unknown fragment")
        for key, field in _fields(inner, fragments).items():
            if key in found:
                raise _Unsupported("a repeated response key")
            found[key] = field
    return found


def _completer(
    type_: GraphQLOutputType,
    selection_set: SelectionSetNode | None,
    fragments: Mapping[str, FragmentDefinitionNode],
) -> Complete:
    """A function from a resolved value (never None) to its JSON; raises on a null where the
    schema says non-null, or on what the type cannot serialize."""
    if isinstance(type_, GraphQLNonNull):
        inner = _completer(type_.of_type, selection_set, fragments)

        def non_null(value: Any) -> Any:
            if value is None:
                raise TypeError("null in a non-null position")
            return inner(value)

        return non_null
    if isinstance(type_, GraphQLList):
        item = _completer(type_.of_type, selection_set, fragments)
        return lambda value: [None if v is None else item(v) for v in value]
    if isinstance(type_, GraphQLScalarType | GraphQLEnumType):
        return _leaf(type_)
    if isinstance(type_, GraphQLObjectType):
        return _object(type_, selection_set, fragments)
    raise _Unsupported(f"type {type_}")


def _leaf(type_: GraphQLScalarType | GraphQLEnumType) -> Complete:
    serialize = type_.serialize

    def leaf(value: Any) -> Any:
        serialized = serialize(value)
        if serialized is None:
            raise TypeError(f"{type_}.serialize({value!r}) gave null")
        return serialized

    return leaf


def _object(
    type_: GraphQLObjectType,
    selection_set: SelectionSetNode | None,
    fragments: Mapping[str, FragmentDefinitionNode],
) -> Complete:
    plan: list[tuple[str, Callable[[Any], Any], Complete | None]] = []
    for key, node in _fields(selection_set, fragments).items():
        name = node.name.value
        if name == "__typename":
            plan.append((key, _constant(type_.name), None))
            continue
        field = type_.fields.get(name)
        definition = (field.extensions or {}).get("strawberry-definition") if field else None
        if (
            field is None
            or node.arguments
            or definition is None
            or definition.base_resolver is not None
            or definition.extensions
            or definition.permission_classes
        ):
            raise _Unsupported(f"{type_.name}.{name} is not plain data")
        plan.append(
            (key, attrgetter(definition.python_name), _nullable(field.type, node, fragments))
        )

    def complete(value: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, get, sub in plan:
            got = get(value)
            out[key] = got if sub is None else sub(got)
        return out

    return complete


def _constant(value: str) -> Callable[[Any], str]:
    return lambda _: value


def _nullable(
    type_: GraphQLOutputType, node: FieldNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> Complete:
    """The completer of a field's value, None included."""
    inner = _completer(type_, node.selection_set, fragments)
    if isinstance(type_, GraphQLNonNull):
        return inner
    return lambda value: None if value is None else inner(value)
