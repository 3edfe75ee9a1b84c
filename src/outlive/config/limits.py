"""The security limits (SECURITY.md lists each one with its default): a part of `Settings`,
kept in a module of its own so that the settings stay readable. Only `Settings` is built."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class SecurityLimits(BaseSettings):
    auth_cache_s: float = Field(5.0, ge=0, description="principal cache TTL per API process")
    ws_recheck_s: float = Field(30.0, gt=0, le=60, description="open sockets' tokens re-checked")
    ws_max_per_tenant: int = Field(1000, ge=1, description="open sockets per tenant and process")
    ws_max_bytes: int = Field(64 * 1024, ge=1024, description="largest WebSocket message")
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="largest HTTP request body")
    max_query_bytes: int = Field(
        64 * 1024, ge=1024, description="largest GraphQL document, refused before any cache"
    )
    max_query_cost: int = Field(20_000, ge=1, description="objects one operation may ask for")
    max_json_depth: int = Field(64, ge=2, description="deepest nesting in GraphQL variables")
    max_query_depth: int = Field(12, ge=2, description="deepest selection in a document")
    max_query_aliases: int = Field(30, ge=1, description="aliases in a document")
    max_query_tokens: int = Field(3000, ge=100, description="tokens in a document")
    ws_init_timeout_s: float = Field(10.0, gt=0, description="to send connection_init")
    ws_max_subscriptions: int = Field(5, ge=1, description="operations on one socket")
    api_limit_concurrency: int = Field(
        10_000, ge=0, description="in-flight HTTP requests per process (503 past it); 0: none"
    )
    ws_max_sockets: int = Field(
        10_000, ge=0, description="open WebSockets per process (1013 past it); 0: none"
    )
    ws_max_unauthenticated: int = Field(
        1000, ge=0, description="sockets not signed in yet per process (the oldest closed past it)"
    )
    api_header_timeout_s: float = Field(10.0, gt=0, description="to receive a request's headers")
    api_max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="a request line and headers, in bytes (431 past it)"
    )
    max_response_bytes: int = Field(
        4 * 1024 * 1024, ge=64 * 1024, description="one answer's rows, in bytes (refused past it)"
    )
    api_statement_timeout_s: float = Field(
        5.0, ge=0, description="PostgreSQL's statement_timeout on the API's connections; 0: none"
    )
    api_tenant_max_reads: int = Field(
        4, ge=1, description="one tenant's statements running at once in an API process"
    )
    signal_mailbox_max: int = Field(
        100, ge=1, description="signals kept undelivered per run (refused past it)"
    )
    signal_mailbox_bytes: int = Field(
        1024 * 1024, ge=64 * 1024, description="bytes of kept undelivered signals' payloads per run"
    )
    webhook_timeout_s: float = Field(10.0, gt=0, description="total deadline of one delivery")
    webhook_max_response_bytes: int = Field(4096, ge=0, description="read of a response body")
    webhook_max_endpoints: int = Field(50, ge=1, description="webhook endpoints per tenant")
