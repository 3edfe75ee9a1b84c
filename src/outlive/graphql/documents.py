"""GraphQL documents, parsed and validated once per process: the one document cache.

`Documents.prepare(text)` parses and validates a document against the schema with the rules every
document meets (`limits.limit_rules`: depth, aliases, NUL; the token limit) and keeps the result,
errors included, under the sha256 of its text. The cache is bounded in bytes (`max_bytes`, an
estimate of what an entry holds: its text and its syntax tree, `ENTRY_BYTES_PER_CHAR` per
character), least recently used first out. Each entry is charged to the tenant whose request
brought it in, and one tenant's entries hold at most `tenant_share_bytes` (a quarter of the cache):
past it, that tenant's own least recently used entries go, never another tenant's, so one tenant's
padded documents cannot flush every tenant's documents and persisted queries. Strawberry's own
parser and validation caches are not installed: this is the only copy, for HTTP (`http.py`) and
for the socket's subscriptions (`schema.PreparedDocuments`) alike, so 500 readers subscribing with
one document parse and validate it once. `outlive_graphql_documents_total{cache}` counts the
lookups: a `miss` is a document parsed and validated.

Keyed by sha256, the cache is also the store of Automatic Persisted Queries (`persisted.py`): a
document that validated is found by the hash a client sends instead of its text, by a tenant that
sent its text before (each entry records its `owners`; another tenant is told
`PersistedQueryNotFound`, so a hash reveals nothing of what other tenants run). A document longer
than `OUTLIVE_MAX_QUERY_BYTES` never gets here (the pipeline refuses it first); nor is it kept
when called directly.

Each prepared document keeps what is computed once per operation: its cost plan (`limits`) and
its compiled plan (`plans`), so nothing else needs a cache of its own.

`scope` is what makes coalescing safe across users: an operation whose root fields all read the
tenant's data only (`TENANT_FIELDS`) may share an execution with any principal of the same tenant;
any other root field (`viewer`, introspection, a field added later) makes it the principal's own,
so nothing is ever shared across users unless the field is listed here on purpose.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
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

from outlive.graphql.limits import CostPlan, cost_plan
from outlive.telemetry import metrics

# Root fields whose answer depends on the tenant only, never on which of its users asks.
TENANT_FIELDS = frozenset(
    {"runs", "run", "agents", "webhookEndpoints", "invitations", "usage", "__typename"}
)
MAX_QUERY_BYTES = 64 * 1024  # OUTLIVE_MAX_QUERY_BYTES: the pipeline refuses longer ones first
DOCUMENT_CACHE_BYTES = 64 * 1024 * 1024
# What an entry costs per character of its text: the text, and the syntax tree graphql-core
# builds from it (measured with tracemalloc on the web app's documents: 53-90 bytes a char).
ENTRY_BYTES_PER_CHAR = 128
OWNER_BYTES = 128  # a tenant id in an entry's `owners` (a UUID and its slot in the set)


class Scope(Enum):
    TENANT = "tenant"
    PRINCIPAL = "principal"


@dataclass(frozen=True, slots=True)
class Operation:
    type: OperationType
    scope: Scope
    node: OperationDefinitionNode
    root_fields: frozenset[str] = frozenset()  # through fragments: what a role is checked on


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document: parsed (`document` is None when it did not), its parse or validation
    `errors`, its operations by name (None: the only one), and what is computed per operation."""

    query: str
    digest: str
    document: DocumentNode | None
    errors: list[GraphQLError]
    operations: Mapping[str | None, Operation] = field(default_factory=dict)
    fragments: Mapping[str, FragmentDefinitionNode] = field(default_factory=dict)
    costs: dict[str | None, CostPlan] = field(default_factory=dict)
    plans: dict[str | None, object] = field(default_factory=dict)  # see `http.choose_route`
    owners: set[Hashable] = field(default_factory=set)  # who sent its text (`persisted`)

    def operation(self, name: str | None) -> Operation | None:
        return self.operations.get(name)

    def cost(self, schema: GraphQLSchema, name: str | None) -> CostPlan:
        plan = self.costs.get(name)
        if plan is None:
            assert self.document is not None  # noqa: S101 (only asked of a parsed document)
            plan = self.costs[name] = cost_plan(schema, self.document, name)
        return plan


def sha256_hex(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


class Documents:
    def __init__(
        self,
        schema: GraphQLSchema,
        *,
        rules: Iterable[Any],
        max_tokens: int,
        max_bytes: int = DOCUMENT_CACHE_BYTES,
        max_query_bytes: int = MAX_QUERY_BYTES,
        tenant_share_bytes: int | None = None,
    ) -> None:
        self._max_query_bytes = max_query_bytes
        self._schema = schema
        self._rules = [*specified_rules, *rules]
        self._max_tokens = max_tokens
        self._max_bytes = max_bytes
        self._bytes = 0
        self._cache: OrderedDict[str, Prepared] = OrderedDict()
        self._share = tenant_share_bytes if tenant_share_bytes is not None else max_bytes // 4
        self._charged: dict[str, tuple[Hashable, int]] = {}  # digest -> (tenant, bytes)
        self._tenant_bytes: dict[Hashable, int] = {}
        self._hits = metrics.GRAPHQL_DOCUMENTS.labels(cache="hit")
        self._misses = metrics.GRAPHQL_DOCUMENTS.labels(cache="miss")

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def prepare(self, query: str, owner: Hashable | None = None) -> Prepared:
        """The document, prepared once and kept under its sha256; `owner` (a tenant) has now
        sent its text, so may later send its hash alone (`persisted`)."""
        digest = sha256_hex(query)
        found = self._cache.get(digest)
        if found is not None:
            self._hits.inc()
            self._cache.move_to_end(digest)
            self._own(found, owner)
            return found
        self._misses.inc()  # `outlive_graphql_documents_total`: parsed and validated here only
        prepared = self._prepare(query, digest)
        if not self._too_long(query):
            self._own(prepared, owner)
            self._keep(prepared, owner)
        return prepared

    def persisted(self, digest: str, owner: Hashable) -> Prepared | None:
        """A document that validated, by the sha256 of its text, for an owner that sent its text
        before; None otherwise (not kept here, or only other tenants know it)."""
        found = self._cache.get(digest)
        if found is None or found.errors or owner not in found.owners:
            return None
        self._cache.move_to_end(digest)
        return found

    def _own(self, prepared: Prepared, owner: Hashable | None) -> None:
        if owner is not None and owner not in prepared.owners:
            prepared.owners.add(owner)
            if prepared.digest in self._cache:
                self._bytes += OWNER_BYTES
                self._evict()

    def _keep(self, prepared: Prepared, owner: Hashable | None) -> None:
        self._cache[prepared.digest] = prepared
        size = _size(prepared)
        self._bytes += size
        if owner is not None:
            self._charged[prepared.digest] = (owner, size)
            self._tenant_bytes[owner] = self._tenant_bytes.get(owner, 0) + size
            self._evict_own(owner, keep=prepared.digest)
        self._evict()

    def _evict_own(self, owner: Hashable, keep: str) -> None:
        """The tenant's own least recently used entries, until it is within its share (the
        entry it just brought in stays, even alone over the share)."""
        while self._tenant_bytes.get(owner, 0) > self._share:
            digest = next(
                (d for d in self._cache if d != keep and self._charged.get(d, (None,))[0] == owner),
                None,
            )
            if digest is None:
                return
            self._drop(digest)

    def _evict(self) -> None:
        while self._bytes > self._max_bytes and self._cache:
            self._drop(next(iter(self._cache)))

    def _drop(self, digest: str) -> None:
        dropped = self._cache.pop(digest)
        self._bytes -= _size(dropped)
        charged = self._charged.pop(digest, None)
        if charged is not None:
            owner, size = charged
            left = self._tenant_bytes[owner] - size
            if left > 0:
                self._tenant_bytes[owner] = left
            else:
                del self._tenant_bytes[owner]

    def _too_long(self, query: str) -> bool:
        limit = self._max_query_bytes
        return len(query) > limit or len(query.encode("utf-8", "surrogatepass")) > limit

    def _prepare(self, query: str, digest: str) -> Prepared:
        if self._too_long(query):
            too_long = GraphQLError(f"the document is over {self._max_query_bytes} bytes")
            return Prepared(query, digest, None, [too_long])
        try:
            document = parse(query, max_tokens=self._max_tokens)
        except GraphQLError as error:
            return Prepared(query, digest, None, [error])
        fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        return Prepared(
            query,
            digest,
            document,
            validate(self._schema, document, self._rules),
            operations=_operations(document, fragments),
            fragments=fragments,
        )


def _size(prepared: Prepared) -> int:
    return len(prepared.query) * ENTRY_BYTES_PER_CHAR + len(prepared.owners) * OWNER_BYTES


def _operations(
    document: DocumentNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> dict[str | None, Operation]:
    found = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    operations: dict[str | None, Operation] = {}
    for op in found:
        names = _root_fields(op.selection_set.selections, fragments, set())
        scope = Scope.TENANT if names <= TENANT_FIELDS else Scope.PRINCIPAL
        operation = Operation(op.operation, scope, op, frozenset(names))
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
