"""GraphQL documents as the read path sees them: parsed and validated once, with each operation's
type and whose data it reads; and the store of Automatic Persisted Queries.

`Documents.prepare(query)` parses and validates a document once per process (an LRU keyed by its
text) against the schema with the same limits as strawberry's path (tokens, depth, aliases). A
document that fails is remembered as failing: the caller hands it to strawberry, which answers
with the contract's error codes.

`scope` is what makes coalescing safe across users: an operation whose root fields all read the
tenant's data only (`TENANT_FIELDS`) may share an execution with any principal of the same tenant;
any other root field (`viewer`, introspection, a field added later) makes it the principal's own,
so nothing is ever shared across users unless the field is listed here on purpose.

Automatic Persisted Queries (Apollo's `persistedQuery` extension, version 1): a client sends the
sha256 of a document instead of its text; an unknown hash is answered `PersistedQueryNotFound`
and the client sends the text with the hash once, which is checked and kept (per process, LRU).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionNode,
    parse,
    specified_rules,
    validate,
)

from outlive.errors import BadUserInput

# Root fields whose answer depends on the tenant only, never on which of its users asks.
TENANT_FIELDS = frozenset(
    {"runs", "run", "agents", "webhookEndpoints", "invitations", "usage", "__typename"}
)
MAX_QUERY_CHARS = 64 * 1024


class Scope(Enum):
    TENANT = "tenant"
    PRINCIPAL = "principal"


@dataclass(frozen=True, slots=True)
class Operation:
    type: OperationType
    scope: Scope
    node: OperationDefinitionNode


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document that parsed and validated, and its operations by name (None: the only one)."""

    query: str
    document: DocumentNode
    operations: Mapping[str | None, Operation]
    fragments: Mapping[str, FragmentDefinitionNode]
    plans: dict[str | None, object] = field(default_factory=dict)  # see `resolvers.plans`

    def operation(self, name: str | None) -> Operation | None:
        return self.operations.get(name)


class Documents:
    def __init__(
        self, schema: GraphQLSchema, *, rules: Iterable[Any], max_tokens: int, size: int = 512
    ) -> None:
        self._schema = schema
        self._rules = [*specified_rules, *rules]
        self._max_tokens = max_tokens
        self._size = size
        self._cache: OrderedDict[str, Prepared | None] = OrderedDict()

    def prepare(self, query: str) -> Prepared | None:
        """The prepared document, or None when it does not parse or validate."""
        cache = self._cache
        if query in cache:
            cache.move_to_end(query)
            return cache[query]
        prepared = self._prepare(query)
        cache[query] = prepared
        if len(cache) > self._size:
            cache.popitem(last=False)
        return prepared

    def _prepare(self, query: str) -> Prepared | None:
        if len(query) > MAX_QUERY_CHARS:
            return None
        try:
            document = parse(query, max_tokens=self._max_tokens)
        except GraphQLError:
            return None
        if validate(self._schema, document, self._rules):
            return None
        fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        return Prepared(
            query=query,
            document=document,
            operations=_operations(document, fragments),
            fragments=fragments,
        )


def _operations(
    document: DocumentNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> dict[str | None, Operation]:
    found = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    operations: dict[str | None, Operation] = {}
    for op in found:
        names = _root_fields(op.selection_set.selections, fragments, set())
        scope = Scope.TENANT if names <= TENANT_FIELDS else Scope.PRINCIPAL
        operation = Operation(type=op.operation, scope=scope, node=op)
        if op.name is not None:
            operations[op.name.value] = operation
        if len(found) == 1:
            operations[None] = operation
    return operations


def _root_fields(
    selections: Iterable[SelectionNode],
    fragments: Mapping[str, FragmentDefinitionNode],
    seen: set[str],
) -> set[str]:
    names: set[str] = set()
    for node in selections:
        if isinstance(node, FieldNode):
            names.add(node.name.value)
        elif isinstance(node, InlineFragmentNode):
            names |= _root_fields(node.selection_set.selections, fragments, seen)
        elif isinstance(node, FragmentSpreadNode) and node.name.value not in seen:
            seen.add(node.name.value)
            fragment = fragments.get(node.name.value)
            if fragment is not None:
                names |= _root_fields(fragment.selection_set.selections, fragments, seen)
    return names


# --- Automatic Persisted Queries -----------------------------------------------------------------


class PersistedQueryNotFound(Exception):
    """The hash is not known here (yet): the client sends the document with it."""


def sha256_hex(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


class PersistedQueries:
    """sha256 -> document text, per process, least recently used first out."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._store: OrderedDict[str, str] = OrderedDict()

    def resolve(self, query: str | None, extension: object) -> tuple[str, str | None]:
        """(the document, the hash to keep it under once it proved valid, or None).

        Raises `BadUserInput` for a malformed extension or a hash that does not match the text,
        `PersistedQueryNotFound` for an unknown hash sent without the text."""
        if not isinstance(extension, dict) or extension.get("version") != 1:
            raise BadUserInput("persistedQuery: only version 1 is supported")
        digest = extension.get("sha256Hash")
        if not isinstance(digest, str) or len(digest) != 64:
            raise BadUserInput("persistedQuery: sha256Hash must be 64 hex digits")
        digest = digest.lower()
        if query is None:
            known = self._store.get(digest)
            if known is None:
                raise PersistedQueryNotFound()
            self._store.move_to_end(digest)
            return known, None
        if sha256_hex(query) != digest:
            raise BadUserInput("provided sha does not match query")
        return query, digest

    def keep(self, digest: str, query: str) -> None:
        self._store[digest] = query
        self._store.move_to_end(digest)
        if len(self._store) > self._size:
            self._store.popitem(last=False)
