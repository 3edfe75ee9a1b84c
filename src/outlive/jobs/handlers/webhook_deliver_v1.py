"""`webhook.deliver.v1`: sign and POST a delivery's body; 2xx → DELIVERED, else retry.

An endpoint is a tenant's, so it is hostile until proven otherwise: the whole attempt (the DNS
lookup, connect, send, response headers, the bit of body we read) runs under one deadline
(`OUTLIVE_WEBHOOK_TIMEOUT_S`), not a per-read timeout a trickling server can stretch forever;
the response is streamed and at most `OUTLIVE_WEBHOOK_MAX_RESPONSE_BYTES` of it are read (the
status decides; the first `ATTEMPT_EXCERPT_BYTES` of the body go into the attempt log); and
the client never keeps a connection alive (`create_client`), so a
connection verified for one host name can never carry another host's delivery to the same
address. `lastError` says what happened in generic words, never an address.

Every attempt that counts is logged (`webhook_delivery_attempts`, through the outbox's lifecycle):
its status, body excerpt, error, when it started and how long it took.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from outlive.db.models import DeliveryStatus
from outlive.db.models.webhooks import ATTEMPT_EXCERPT_BYTES
from outlive.ids import DeliveryId
from outlive.jobs.deps import JobDeps
from outlive.jobs.envelopes import DeliverWebhookV1
from outlive.services import destinations, outbox, webhooks


class DeliveryFailed(Exception):
    """The endpoint did not answer 2xx; the consumer schedules the next attempt."""


def create_client(
    max_connections: int = 100,
    *,
    wrap: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """The deliveries' client: no keep-alive (one connection per attempt, closed after it), no
    redirects (a 3xx is an answer, not an invitation to go elsewhere). `wrap`: around its
    transport (the worker's metrics); `verify`: the process's TLS context (`runtime`)."""
    transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(
        verify=verify,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=0),
    )
    return httpx.AsyncClient(
        transport=wrap(transport) if wrap is not None else transport,
        follow_redirects=False,
        timeout=None,  # noqa: S113 (the attempt's one deadline, `handle`; not httpx's 5 s read)
    )


@dataclass(slots=True)
class _Clock:
    """When an attempt started, and its log entry once it ends."""

    started_at: datetime
    started: float

    @classmethod
    def start(cls) -> _Clock:
        return cls(datetime.now(UTC), time.monotonic())

    def attempt(self, status: int | None = None, excerpt: str | None = None) -> outbox.Attempt:
        elapsed_ms = round((time.monotonic() - self.started) * 1000)
        return outbox.Attempt(self.started_at, elapsed_ms, status, excerpt)


async def handle(deps: JobDeps, payload: DeliverWebhookV1) -> None:
    delivery_id = DeliveryId(payload.delivery_id)
    outgoing = await webhooks.pending_delivery(deps.sessions, delivery_id)
    if outgoing is None:
        return  # already delivered, given up, or its endpoint was deleted
    timeout = deps.settings.webhook_timeout_s
    clock = _Clock.start()
    try:
        async with asyncio.timeout(timeout):  # the lookup included: the name is the tenant's
            host, address = await destinations.resolve_public(
                outgoing.url,
                allow_private=deps.settings.webhook_allow_private,
                tenant=outgoing.tenant_id,  # a tenant's slow name server delays only its own
            )
            status, excerpt = await _post(deps, outgoing, host, address)
    except destinations.LookupFailed:  # the name server is slow or down: retried, not failed
        await _record(deps, delivery_id, clock.attempt(), "the host name did not resolve")
        raise DeliveryFailed("lookup failed") from None
    except destinations.UnsafeDestination as exc:  # permanent: recorded, not retried
        async with deps.sessions.unit() as uow:
            await webhooks.finish_delivery(
                uow,
                delivery_id,
                status=DeliveryStatus.FAILED,
                error=exc.message,
                count_attempt=True,
                attempt=clock.attempt(),
            )
        return
    except TimeoutError:
        await _record(deps, delivery_id, clock.attempt(), f"no answer within {timeout:g}s")
        raise DeliveryFailed("timed out") from None
    except httpx.HTTPError as exc:
        error = f"connection failed ({type(exc).__name__})"
        await _record(deps, delivery_id, clock.attempt(), error)
        raise DeliveryFailed(type(exc).__name__) from exc
    if not 200 <= status < 300:
        error = f"answered {status}"
        await _record(deps, delivery_id, clock.attempt(status, excerpt), error)
        raise DeliveryFailed(error)
    async with deps.sessions.unit() as uow:
        await webhooks.finish_delivery(
            uow,
            delivery_id,
            status=DeliveryStatus.DELIVERED,
            response_status=status,
            count_attempt=True,
            attempt=clock.attempt(status, excerpt),
        )


async def _post(
    deps: JobDeps, outgoing: webhooks.Outgoing, host: str, address: str
) -> tuple[int, str | None]:
    """POST to the checked address (the name goes in Host and SNI); the status and the start of
    the body (at most `ATTEMPT_EXCERPT_BYTES`, decoded, what is not UTF-8 or is NUL replaced by
    U+FFFD; None if empty), after reading at most the configured number of body bytes."""
    headers = webhooks.signed_headers(outgoing)
    headers["connection"] = "close"
    request = destinations.pin(
        deps.http.build_request("POST", outgoing.url, content=outgoing.body, headers=headers),
        host,
        address,
    )
    response = await deps.http.send(request, stream=True)
    try:
        limit, head = deps.settings.webhook_max_response_bytes, bytearray()
        read = 0
        if limit > 0:
            async for chunk in response.aiter_raw():
                if len(head) < ATTEMPT_EXCERPT_BYTES:
                    head += chunk[: ATTEMPT_EXCERPT_BYTES - len(head)]
                read += len(chunk)
                if read >= limit:
                    break
        excerpt = bytes(head[: min(limit, ATTEMPT_EXCERPT_BYTES)])
        text = excerpt.decode(errors="replace").replace("\x00", "\ufffd")  # text cannot hold NUL
        return response.status_code, text or None
    finally:
        await response.aclose()


async def _record(
    deps: JobDeps, delivery_id: DeliveryId, attempt: outbox.Attempt, error: str
) -> None:
    async with deps.sessions.unit() as uow:
        await webhooks.record_attempt(
            uow, delivery_id, response_status=attempt.response_status, error=error, attempt=attempt
        )


async def give_up(deps: JobDeps, payload: DeliverWebhookV1, error: str) -> None:
    """FAILED, keeping the last attempt's own (generic) `lastError`: `error` is an exception's
    text, which is for the log, not for the tenant."""
    async with deps.sessions.unit() as uow:
        await webhooks.finish_delivery(
            uow, DeliveryId(payload.delivery_id), status=DeliveryStatus.FAILED
        )


async def retrying(deps: JobDeps, payload: DeliverWebhookV1, delay_s: float) -> None:
    """The failed attempt's retry is due in `delay_s`: the row says when (`nextAttemptAt`)."""
    async with deps.sessions.unit() as uow:
        await webhooks.schedule_next_attempt(uow, DeliveryId(payload.delivery_id), delay_s)
