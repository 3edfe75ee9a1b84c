"""Where a tenant may make the service connect: server-side request forgery, refused.

Only http(s) is accepted; loopback, private, link-local and other non-global addresses are refused
unless `OUTLIVE_WEBHOOK_ALLOW_PRIVATE=1`, and so is every IPv6 form that embeds an IPv4 address
(IPv4-compatible `::/96`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo
`2001::/32`, IPv4-mapped), whose embedded address is checked as well. Whatever the reason, the
caller hears one generic "destination not allowed": an error that named the resolved address, or
told "does not resolve" from "private", would let a tenant map the internal network and its DNS.
A caller connects to the address that was checked (`pinned_url`), so DNS rebinding cannot slip
past between the check and the connection.

A tenant chooses the name, and so how slowly it resolves. Lookups run on a thread pool of their
own (`RESOLVER_THREADS`): the system resolver cannot be interrupted, so a lookup given up on keeps
its thread until the resolver does, and on the event loop's default executor enough of those
would hold up every other name this process resolves (its own database, say). Within that pool a
tenant holds at most `TENANT_LOOKUPS` lookups at once, counted until the resolver really gives
the thread back (not when the caller stops waiting), so one tenant's slow name server delays only
that tenant's own lookups: it takes `RESOLVER_THREADS / TENANT_LOOKUPS` (16) tenants with hostile
name servers at once, in one process, to make another tenant's lookup queue for a thread. A
lookup gives up after `RESOLVE_TIMEOUT_S`, counted once the tenant's turn came (not while it
waited behind its own lookups); a name that does not resolve, in time or at all, is
`LookupFailed`, which a delivery retries: only an address that is not public is refused for good.

The same guard serves agents: `GuardedTransport` checks every request an agent sends through
`ctx.public_http` (review finding I7), so a third-party agent that fetches a URL taken from a
tenant's input cannot reach the internal network. One guard, two callers: webhook deliveries and
agents both resolve with `resolve_public` (the tenant's share of the pool) and connect to the
checked address (`pin`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit, urlunsplit

import httpx

from outlive.errors import BadUserInput

NOT_ALLOWED = "destination not allowed"
# IPv6 ranges that carry (or translate to) an IPv4 address, refused outright.
EMBEDDING_V6 = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/96",  # IPv4-compatible
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT, RFC 6052/7915): a translator maps it to v4
        "64:ff9b::/96",  # NAT64
        "64:ff9b:1::/48",  # local NAT64
        "2002::/16",  # 6to4
        "2001::/32",  # Teredo
    )
)


RESOLVE_TIMEOUT_S = 5.0
RESOLVER_THREADS = 32
TENANT_LOOKUPS = 2  # threads of the pool one tenant may hold at once (per process)
_resolver: ThreadPoolExecutor | None = None
_held: dict[object, int] = {}  # tenant -> threads it holds now (lookups not given back yet)
_freed: dict[object, asyncio.Event] = {}


class UnsafeDestination(BadUserInput):
    """A webhook URL that is not http(s) or resolves to a non-public address."""


class LookupFailed(UnsafeDestination):
    """The name did not resolve (in time, or at all): refused at `createWebhookEndpoint`, but a
    delivery retries it later (the name server may be slow or down for now)."""


def check_url_shape(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise UnsafeDestination(f"webhook URLs must be http or https, not {parts.scheme or 'none'}")
    if not parts.hostname:
        raise UnsafeDestination("a webhook URL needs a host")
    if parts.username or parts.password:
        raise UnsafeDestination("a webhook URL must not carry credentials")
    if len(url) > 2048:
        raise UnsafeDestination("a webhook URL is at most 2048 characters")
    return urlunsplit(parts)


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A global unicast address that embeds no IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in network for network in EMBEDDING_V6):
            return False
        embedded = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
        if any(v4 is not None and not is_public(v4) for v4 in embedded):
            return False
    return ip.is_global and not ip.is_multicast


async def lookup(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, from the system resolver on the lookups' own pool."""
    global _resolver
    if _resolver is None:
        _resolver = ThreadPoolExecutor(RESOLVER_THREADS, thread_name_prefix="outlive-dns")
    infos = await asyncio.get_running_loop().run_in_executor(
        _resolver, socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM
    )
    return [str(info[4][0]) for info in infos]


async def tenant_lookup(host: str, port: int, tenant: object) -> list[str]:
    """`lookup`, once `tenant` holds fewer than `TENANT_LOOKUPS` lookups, under
    `RESOLVE_TIMEOUT_S` from then on. A lookup given up on is not cancelled (the resolver's
    thread cannot be): it keeps its place in the tenant's count until it really ends."""
    while _held.get(tenant, 0) >= TENANT_LOOKUPS:
        freed = _freed.setdefault(tenant, asyncio.Event())
        freed.clear()
        await freed.wait()
    _held[tenant] = _held.get(tenant, 0) + 1
    running = asyncio.ensure_future(lookup(host, port))
    running.add_done_callback(lambda task: _give_back(tenant, task))
    done, _ = await asyncio.wait({running}, timeout=RESOLVE_TIMEOUT_S)
    if not done:
        raise TimeoutError(f"no answer within {RESOLVE_TIMEOUT_S:g}s")
    return running.result()


def _give_back(tenant: object, task: asyncio.Future[list[str]]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a lookup given up on fails with nobody waiting for it
    left = _held.get(tenant, 1) - 1
    if left <= 0:
        _held.pop(tenant, None)
    else:
        _held[tenant] = left
    if (freed := _freed.pop(tenant, None)) is not None:
        freed.set()


async def resolve_public(
    url: str, *, allow_private: bool, tenant: object = None
) -> tuple[str, str]:
    """(host, address to connect to): the first resolved address, all of them checked. A name
    that does not resolve within `RESOLVE_TIMEOUT_S` (or at all) is `LookupFailed`; an address
    that is not public, `UnsafeDestination`. Both say only "destination not allowed"."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = await tenant_lookup(host, port, tenant)
    except (OSError, UnicodeError):  # TimeoutError is an OSError, and so is socket.gaierror
        raise LookupFailed(NOT_ALLOWED) from None
    except ValueError:
        raise UnsafeDestination(NOT_ALLOWED) from None
    try:
        ips = [ipaddress.ip_address(address.split("%")[0]) for address in addresses]
    except ValueError:
        raise UnsafeDestination(NOT_ALLOWED) from None
    if not addresses or not (allow_private or all(is_public(ip) for ip in ips)):
        raise UnsafeDestination(NOT_ALLOWED)
    return host, addresses[0]


def pinned_url(url: str, address: str) -> str:
    """The URL with its host replaced by the checked address (the Host header keeps the name)."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def pin(request: httpx.Request, host: str, address: str) -> httpx.Request:
    """`request`, sent to the checked `address`: its Host header and TLS server name keep the
    name, so DNS rebinding cannot slip past between the check and the connection."""
    url = str(request.url)
    headers = httpx.Headers(request.headers)
    headers["host"] = request.url.netloc.decode("ascii")
    return httpx.Request(
        request.method,
        pinned_url(url, address),
        headers=headers,
        stream=request.stream,
        extensions={**request.extensions, "sni_hostname": host},
    )


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends a request only to a public address (`resolve_public`, as
    for a webhook, the lookups counted against `tenant`), pinned to the address it checked. A
    refused destination raises `UnsafeDestination` ("destination not allowed"); a name that
    does not resolve, `LookupFailed`. Redirects are not followed unless the client asks, and
    each hop then comes through here again. `inner` is shared and closed by its owner."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, *, tenant: object, allow_private: bool
    ) -> None:
        self._inner = inner
        self._tenant = tenant
        self._allow_private = allow_private

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = check_url_shape(str(request.url))
        host, address = await resolve_public(
            url, allow_private=self._allow_private, tenant=self._tenant
        )
        return await self._inner.handle_async_request(pin(request, host, address))

    async def aclose(self) -> None:
        """Nothing: the inner transport outlives this one."""
