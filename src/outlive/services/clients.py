"""Who the client of a request is, behind the proxies the operator trusts.

A per-client limit (`acceptInvitation`, `invitationCode`) must key on something the client cannot
choose. The connecting peer is that, unless it is a proxy the operator named: then the proxy's
`Forwarded` (RFC 7239, its `for=` parameters) or else `X-Forwarded-For` header names the hop
before it. The chain is read from the right, the end the operator's own proxies write: each hop
is believed only while the hop after it is trusted, and the first address that is not a
trusted proxy (`OUTLIVE_TRUSTED_PROXIES`) is the client. So a client that writes its own header
only adds hops to the left of what a trusted proxy appended, which are never read; behind a
remote load balancer named in the setting, every client gets its own key, not the balancer's.

Outlive reads these headers itself (uvicorn's own proxy handling is off), so the rule is one
function with its tests, whatever server runs the app.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from functools import lru_cache

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
UNKNOWN = "unknown"


@lru_cache(maxsize=8)
def trusted_networks(trusted: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in trusted)


def client_address(
    peer: str | None, headers: Iterable[tuple[bytes, bytes]], trusted: Sequence[str]
) -> str:
    """The client's address: `peer`, or the hop a chain of trusted proxies says it came from."""
    networks = trusted_networks(tuple(trusted))
    address = _address(peer) if peer else None
    if address is None:
        return peer or UNKNOWN
    hops = _hops(headers)
    while hops and _is_trusted(address, networks):
        hop = _address(hops.pop())
        if hop is None:
            return UNKNOWN  # a trusted proxy passed on what is not an address ("unknown")
        address = hop
    return address


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in network for network in networks)


def _hops(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The addresses the proxies listed, left (the first hop) to right (the last proxy's peer):
    from `Forwarded` when any was sent, else from `X-Forwarded-For`."""
    forwarded: list[str] = []
    forwarded_for: list[str] = []
    for name, value in headers:
        if name == b"forwarded":
            forwarded += _forwarded_for(value.decode("latin-1"))
        elif name == b"x-forwarded-for":
            forwarded_for += [v.strip() for v in value.decode("latin-1").split(",")]
    return forwarded or forwarded_for


def _forwarded_for(value: str) -> list[str]:
    """The `for=` of each element of a `Forwarded` header (an element without one counts as
    an unknown hop)."""
    found = []
    for element in value.split(","):
        node = UNKNOWN
        for pair in element.split(";"):
            key, _, raw = pair.strip().partition("=")
            if key.strip().lower() == "for":
                node = raw.strip().strip('"')
        found.append(node)
    return found


def _address(node: str) -> str | None:
    """The IP address of a hop (`1.2.3.4`, `1.2.3.4:5678`, `[2001:db8::1]:80`, `2001:db8::1`),
    in its canonical form; None for anything else (`unknown`, `_obfuscated`, junk)."""
    text = node.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)  # ::ffff:1.2.3.4 is 1.2.3.4, for the trust check and the key
