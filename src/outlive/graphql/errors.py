"""Every GraphQL error leaves with one of the contract's codes; unexpected ones are masked.

- a `DomainError` raised by a service: its own code and message; `ServiceUnavailable` (PostgreSQL
  cannot be reached, raised by the db layer) also makes the answer an HTTP 503 (`status_of`);
- a parse or validation error (including the depth, alias and token limits):
  `GRAPHQL_VALIDATION_FAILED`; a variable of the wrong shape: `BAD_USER_INPUT`;
- anything else: "Internal server error." with `INTERNAL_SERVER_ERROR`, logged with its traceback
  and never shown to the caller.
"""

from __future__ import annotations

import logging

from graphql import GraphQLError
from strawberry.extensions import MaskErrors
from strawberry.schema.exceptions import InvalidOperationTypeError

from outlive.errors import DomainError, ServiceUnavailable

log = logging.getLogger("outlive.graphql")

INTERNAL_MESSAGE = "Internal server error."


def error_payload(message: str, code: str) -> dict[str, object]:
    """The contract's error shape for a request refused outside execution."""
    return {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]}


def status_of(errors: list[GraphQLError] | None) -> int:
    """The HTTP status of an executed operation's answer: 503 when an error says PostgreSQL
    cannot be reached (the client retries after `retryAfter`), 200 otherwise."""
    return 503 if any(unavailable(e) is not None for e in errors or ()) else 200


def unavailable(error: BaseException | None) -> ServiceUnavailable | None:
    """The `ServiceUnavailable` behind an error (a GraphQL error wraps what a resolver raised)."""
    while isinstance(error, GraphQLError):
        error = error.original_error
    return error if isinstance(error, ServiceUnavailable) else None


def unavailable_payload(error: ServiceUnavailable) -> dict[str, object]:
    """The contract's error shape for `SERVICE_UNAVAILABLE` refused outside execution."""
    extensions = {"code": error.code, **error.extensions}
    return {"data": None, "errors": [{"message": error.message, "extensions": extensions}]}


def _with_code(
    error: GraphQLError,
    code: str,
    message: str | None = None,
    extra: dict[str, object] | None = None,
) -> GraphQLError:
    return GraphQLError(
        message=message if message is not None else error.message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=None,
        extensions={**(error.extensions or {}), **(extra or {}), "code": code},
    )


def coded(error: GraphQLError) -> GraphQLError:
    if error.extensions and "code" in error.extensions:
        return error
    original = error.original_error
    while isinstance(original, GraphQLError) and original.original_error is not None:
        original = original.original_error
    if isinstance(original, DomainError):
        return _with_code(error, original.code, original.message, original.extensions)
    if isinstance(original, InvalidOperationTypeError):  # a query or mutation on the socket
        return _with_code(
            error, "BAD_USER_INPUT", f"{error.message} over the socket: use POST /graphql"
        )
    if error.path is None:  # before execution: parsing, validation, variable coercion
        if error.message.startswith("Variable '$"):
            return _with_code(error, "BAD_USER_INPUT")
        return _with_code(error, "GRAPHQL_VALIDATION_FAILED")
    log.error("unexpected error in %s", error.path, exc_info=original)
    return _with_code(error, "INTERNAL_SERVER_ERROR", INTERNAL_MESSAGE)


class ErrorCodes(MaskErrors):
    """`coded` for what strawberry executes (the socket's subscriptions)."""

    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        return [coded(e) for e in errors]
