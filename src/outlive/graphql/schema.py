"""The schema the app serves: the root types of `outlive.resolvers`, with what strawberry executes
(the socket's subscriptions; HTTP is `http.py`'s) taking its documents from the one document cache
(`documents.Documents`, shared with HTTP) and its error codes from `errors.ErrorCodes`.

`PreparedDocuments` hands strawberry the cached document and its validation errors, so a
subscription document is parsed and validated once per process, not once per subscribe (500
readers of one run subscribing with one document validated it 500 times: a third of the API's
time, bench/streams.py). Before execution it applies the limits HTTP applies (`limits`: the
variables' NULs and depth, the operation's cost, from the cost plan kept with the document); an
operation over them gets an `error` frame. No `ParserCache`/`ValidationCache`: one cache only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import strawberry
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension

from outlive.config import Settings
from outlive.errors import BadUserInput
from outlive.graphql.documents import Documents, Prepared
from outlive.graphql.errors import ErrorCodes
from outlive.graphql.events import SharedEvents
from outlive.graphql.limits import check_cost, check_variables, limit_rules
from outlive.resolvers.schema import build_schema


@dataclass(frozen=True, slots=True)
class Served:
    """The strawberry schema and the one document cache both transports prepare documents in."""

    schema: strawberry.Schema
    documents: Documents


def served(settings: Settings) -> Served:
    documents: list[Documents] = []  # made from the schema, then used by its extensions
    schema = build_schema(
        extensions=[lambda: PreparedDocuments(documents[0]), ErrorCodes],
        execution_context_class=SharedEvents,  # a `runOutput` chunk executed once, not per reader
    )
    documents.append(
        Documents(
            schema._schema,
            rules=limit_rules(settings),
            max_tokens=settings.max_query_tokens,
            max_query_bytes=settings.max_query_bytes,
        )
    )
    return Served(schema, documents[0])


def served_schema(settings: Settings) -> strawberry.Schema:
    return served(settings).schema


class PreparedDocuments(SchemaExtension):
    """Strawberry's parse and validation steps answered from the document cache, charged to the
    subscriber's tenant as HTTP charges a request's (see `documents`), then the limits."""

    def __init__(self, documents: Documents) -> None:
        super().__init__()
        self._documents = documents
        self._prepared: Prepared | None = None

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query is not None:  # strawberry refuses an operation without one first
            principal = getattr(context.context, "principal", None)
            owner = principal.tenant.id if principal is not None else None
            prepared = self._prepared = self._documents.prepare(context.query, owner)
            if prepared.document is not None:
                context.graphql_document = prepared.document  # strawberry skips its parse
            else:  # strawberry parses it again, as the cache did, for its own syntax error frame
                context.parse_options["max_tokens"] = self._documents.max_tokens
        yield

    def on_validate(self) -> Iterator[None]:
        """The errors found when the document was prepared (strawberry does not validate once
        they are set), else the limits' refusal, if any."""
        context, prepared = self.execution_context, self._prepared
        if prepared is not None:
            errors = list(prepared.errors)
            if not errors:
                try:
                    settings = context.context.services.settings
                    check_variables(context.variables, settings.max_json_depth)
                    plan = prepared.cost(context.schema._schema, context.operation_name)
                    check_cost(plan, context.variables, settings)
                except BadUserInput as exc:
                    errors = [GraphQLError(exc.message, original_error=exc)]
            context.pre_execution_errors = errors
        yield
