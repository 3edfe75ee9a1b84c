"""Answers given before GraphQL runs (auth, size, an unreachable cell): the contract's error
shape, and the bearer token of a request."""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import Scope

from outlive.errors import ServiceUnavailable
from outlive.graphql.errors import unavailable_payload


def error_response(message: str, code: str, status: int, **headers: str) -> JSONResponse:
    """The contract's error shape outside GraphQL execution (auth, size, malformed bodies)."""
    return JSONResponse(
        {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]},
        status_code=status,
        headers=headers or None,
    )


def unauthenticated_response(message: str) -> JSONResponse:
    return error_response(message, "UNAUTHENTICATED", 401, **{"WWW-Authenticate": "Bearer"})


def too_large(limit: int) -> JSONResponse:
    return error_response(f"request body too large (at most {limit} bytes)", "BAD_USER_INPUT", 413)


def unavailable_response(exc: ServiceUnavailable) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)}
    return JSONResponse(unavailable_payload(exc), status_code=503, headers=headers)


def bearer_of(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bearer(value.decode("latin-1"))
    return None


def bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
