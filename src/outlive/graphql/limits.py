"""What one GraphQL operation may ask for: its cost, and no NUL or deeply nested input.

**Cost.** Each field that returns objects costs the product of the list sizes along its path:
`runs(first: 100) { edges { node { events(first: 1000) { seq } } } }` costs 100 for `runs`,
`edges` and `node` each and 100 * 1000 for `events`. A list's size is its `first:` (or `days:`)
argument, its default when omitted, or a fixed bound for lists without one (the endpoints cap,
the invitations page). An operation over `OUTLIVE_MAX_QUERY_COST` is refused as `BAD_USER_INPUT`
before anything runs, with the cost and the limit in the message. The plan (which arguments
multiply which fields) is computed once per document and operation; a request only multiplies its
numbers.

**Input.** PostgreSQL refuses `\\x00` in text and jsonb, and deep JSON exhausts the stack: a NUL
in any string (a literal in the document or anywhere in the variables) and variables nested
deeper than `OUTLIVE_MAX_JSON_DEPTH` are `BAD_USER_INPUT` at the boundary, never a 500.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    BREAK,
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    StringValueNode,
    ValidationContext,
    ValidationRule,
    VariableNode,
    Visitor,
    get_named_type,
    get_operation_ast,
    is_list_type,
    is_object_type,
    is_wrapping_type,
    visit,
)
from graphql.type.definition import GraphQLNamedType, GraphQLObjectType, GraphQLOutputType
from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter

from outlive.errors import BadUserInput

SIZE_ARGUMENTS = ("first", "days")
# Lists without a size argument, and the most they hold (services enforce these bounds).
FIXED_SIZES = {
    ("Query", "invitations"): 200,
    ("Query", "agents"): 50,
    ("RunConnection", "edges"): 1,  # as many as the connection's `first:`, already counted
    ("Run", "ancestors"): 8,  # a tree's depth (services.runs.cascade.MAX_DEPTH)
    ("Run", "childCounts"): 6,  # one per RunStatus
    ("WebhookDelivery", "attemptLog"): 20,  # the newest kept (models.webhooks.ATTEMPTS_KEPT)
}
UNKNOWN_LIST_SIZE = 100  # a list this table does not know: assume a page
ENDPOINTS = ("Query", "webhookEndpoints")  # bounded by OUTLIVE_WEBHOOK_MAX_ENDPOINTS

Factor = int | tuple[str, int]  # a literal size, or (variable name, size when it is unset)


@dataclass(frozen=True, slots=True)
class CostPlan:
    terms: tuple[tuple[tuple[Factor, ...], int], ...]  # (factors along a path, how many such)

    def cost(self, variables: Mapping[str, Any] | None, endpoints: int) -> int:
        total = 0
        for factors, count in self.terms:
            product = count
            for factor in factors:
                product *= _size(factor, variables, endpoints)
            total += product
        return total


ENDPOINTS_FACTOR = ("", -1)  # resolved to the configured endpoints cap when evaluated


def _size(factor: Factor, variables: Mapping[str, Any] | None, endpoints: int) -> int:
    if isinstance(factor, int):
        return max(factor, 0)
    if factor == ENDPOINTS_FACTOR:
        return endpoints
    name, default = factor
    value = (variables or {}).get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        return default  # unset, null (the default applies) or not an Int (execution refuses it)
    return max(value, 0)


class _Planner:
    def __init__(self, schema: GraphQLSchema, document: DocumentNode) -> None:
        self.schema = schema
        self.fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self.terms: dict[tuple[Factor, ...], int] = {}
        self.defaults: dict[str, int] = {}

    def plan(self, operation: OperationDefinitionNode) -> CostPlan:
        for definition in operation.variable_definitions or ():
            if isinstance(definition.default_value, IntValueNode):
                self.defaults[definition.variable.name.value] = int(definition.default_value.value)
        root = self.schema.get_root_type(operation.operation)
        if root is not None:
            self._walk(root, operation.selection_set, (), set())
        return CostPlan(tuple(self.terms.items()))

    def _walk(
        self,
        parent: GraphQLObjectType,
        selections: SelectionSetNode,
        path: tuple[Factor, ...],
        seen: set[str],
    ) -> None:
        for node, on in self._fields(parent, selections, seen):
            definition = on.fields.get(node.name.value)
            if definition is None or node.selection_set is None:
                continue  # a scalar, `__typename` or introspection (bounded by the schema)
            factors = (*path, *self._factor(on, node, definition.type, definition.args))
            self.terms[factors] = self.terms.get(factors, 0) + 1
            child = get_named_type(definition.type)
            if is_object_type(child):
                assert isinstance(child, GraphQLObjectType)  # noqa: S101 (narrowing)
                self._walk(child, node.selection_set, factors, seen)

    def _fields(
        self, parent: GraphQLObjectType, selections: SelectionSetNode, seen: set[str]
    ) -> Iterator[tuple[FieldNode, GraphQLObjectType]]:
        for node in selections.selections:
            if isinstance(node, FieldNode):
                yield node, parent
            elif isinstance(node, InlineFragmentNode):
                on = self._type(node.type_condition.name.value if node.type_condition else None)
                yield from self._fields(on or parent, node.selection_set, seen)
            elif isinstance(node, FragmentSpreadNode) and node.name.value not in seen:
                fragment = self.fragments.get(node.name.value)
                if fragment is not None:  # validation already refused unknown and cyclic ones
                    on = self._type(fragment.type_condition.name.value) or parent
                    yield from self._fields(on, fragment.selection_set, {*seen, node.name.value})

    def _type(self, name: str | None) -> GraphQLObjectType | None:
        found: GraphQLNamedType | None = self.schema.get_type(name) if name else None
        return found if isinstance(found, GraphQLObjectType) else None

    def _factor(
        self, parent: GraphQLObjectType, node: FieldNode, type_: GraphQLOutputType, args: Any
    ) -> tuple[Factor, ...]:
        for name in SIZE_ARGUMENTS:
            if name in args:
                default = args[name].default_value
                return (self._argument(node, name, default if isinstance(default, int) else 1),)
        if (parent.name, node.name.value) == ENDPOINTS:
            return (ENDPOINTS_FACTOR,)
        fixed = FIXED_SIZES.get((parent.name, node.name.value))
        if fixed is not None:
            return (fixed,)
        while is_wrapping_type(type_) and not is_list_type(type_):
            type_ = type_.of_type  # NonNull
        return (UNKNOWN_LIST_SIZE,) if is_list_type(type_) else ()

    def _argument(self, node: FieldNode, name: str, default: int) -> Factor:
        for argument in node.arguments or ():
            if argument.name.value != name:
                continue
            value = argument.value
            if isinstance(value, IntValueNode):
                return int(value.value)
            if isinstance(value, VariableNode):
                variable = value.name.value
                return (variable, self.defaults.get(variable, default))
        return default


def cost_plan(
    schema: GraphQLSchema, document: DocumentNode, operation_name: str | None
) -> CostPlan:
    """The plan of one operation, kept with its document (`documents.Prepared.cost`) for HTTP
    and the socket alike."""
    operation = get_operation_ast(document, operation_name)
    return CostPlan(()) if operation is None else _Planner(schema, document).plan(operation)


def limit_rules(settings: Any) -> list[type[ASTValidationRule]]:
    """The validation rules every document meets, over HTTP and on the socket: depth, aliases, no
    NUL in a string literal. Built once per process: each limiter makes a new rule class."""
    return [
        *map(_non_empty, QueryDepthLimiter(max_depth=settings.max_query_depth).validation_rules),
        *MaxAliasesLimiter(max_alias_count=settings.max_query_aliases).validation_rules,
        NoNulInStrings,
    ]


# --- input ------------------------------------------------------------------------------------


def check_variables(variables: Mapping[str, Any] | None, max_depth: int) -> None:
    """`BadUserInput` for a NUL in any string (keys included) or nesting over `max_depth`."""
    if not variables:
        return
    stack: list[tuple[Any, int]] = [(variables, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise BadUserInput("text must not contain NUL (\\u0000) characters")
        elif isinstance(value, dict | list):
            if depth > max_depth:
                raise BadUserInput(f"variables nest deeper than {max_depth} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and "\x00" in key:
                    raise BadUserInput("text must not contain NUL (\\u0000) characters")
                stack.append((item, depth + 1))


def _non_empty(rule: type[ASTValidationRule]) -> type[ASTValidationRule]:
    """`rule` (strawberry's depth limiter, which measures the document when it is built and
    fails on an empty selection set: graphql-core 3.3 parses `{}`), with a document holding an
    empty selection set reported as invalid instead of measured."""

    class NonEmpty(rule):  # type: ignore[valid-type, misc]
        def __init__(self, context: ValidationContext) -> None:
            empty = _empty_selection(context.document)
            if empty is None:
                super().__init__(context)
                return
            ASTValidationRule.__init__(self, context)
            message = "a selection set must select at least one field"
            self.report_error(GraphQLError(message, empty))

    return NonEmpty


def _empty_selection(document: DocumentNode) -> SelectionSetNode | None:
    found: list[SelectionSetNode] = []

    class Find(Visitor):
        def enter_selection_set(self, node: SelectionSetNode, *_: Any) -> Any:
            if not node.selections:
                found.append(node)
                return BREAK
            return None

    visit(document, Find())
    return found[0] if found else None


class NoNulInStrings(ValidationRule):
    """A string literal in the document with a NUL in it (`"\\u0000"`) is `BAD_USER_INPUT`."""

    def enter_string_value(self, node: StringValueNode, *_: Any) -> None:
        if "\x00" in node.value:
            message = "text must not contain NUL (\\u0000) characters"
            self.report_error(GraphQLError(message, node, original_error=BadUserInput(message)))


def check_cost(plan: CostPlan, variables: Mapping[str, Any] | None, settings: Any) -> None:
    """`BadUserInput` for an operation over the cost limit."""
    cost = plan.cost(variables, settings.webhook_max_endpoints)
    if cost > settings.max_query_cost:
        raise BadUserInput(
            f"this operation may return {cost} objects, over the limit of "
            f"{settings.max_query_cost} (each list multiplies the `first:` of the lists "
            "around it: ask for smaller pages)"
        )
