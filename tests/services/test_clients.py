"""The client behind trusted proxies (`OUTLIVE_TRUSTED_PROXIES`, issue 39 L3): per-client limits
key on an address the client cannot choose, with a proxy in front and without one."""

from __future__ import annotations

import httpx
import pytest

from outlive.app import build_app
from outlive.services.clients import client_address
from tests.conftest import make_settings
from tests.support import Servers

LOOPBACK = ["127.0.0.1", "::1"]
BALANCER = ["10.0.0.0/8"]


def xff(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"x-forwarded-for", value.encode())]


@pytest.mark.parametrize(
    ("peer", "headers", "trusted", "client"),
    [
        # no proxy: the peer, whatever it writes
        ("198.51.100.7", xff("203.0.113.9"), LOOPBACK, "198.51.100.7"),
        ("198.51.100.7", [], LOOPBACK, "198.51.100.7"),
        # a remote balancer named: the hop it appended, not the balancer
        ("10.1.2.3", xff("203.0.113.9"), BALANCER, "203.0.113.9"),
        # a client's own header is to the left of what the balancer appended: never read
        ("10.1.2.3", xff("1.1.1.1, 203.0.113.9"), BALANCER, "203.0.113.9"),
        # two trusted proxies in a row
        ("10.1.2.3", xff("203.0.113.9, 10.9.9.9"), BALANCER, "203.0.113.9"),
        # the balancer not named: it is the client (one shared key, but never a forged one)
        ("10.1.2.3", xff("203.0.113.9"), LOOPBACK, "10.1.2.3"),
        # RFC 7239 Forwarded, preferred over X-Forwarded-For; ports and brackets dropped
        (
            "10.1.2.3",
            [(b"forwarded", b'for="[2001:db8::5]:443";proto=https'), *xff("1.1.1.1")],
            BALANCER,
            "2001:db8::5",
        ),
        (
            "10.1.2.3",
            [(b"forwarded", b"for=203.0.113.9:5555, for=10.2.2.2")],
            BALANCER,
            "203.0.113.9",
        ),
        # an IPv4-mapped peer is its IPv4 address, for the trust check too
        ("::ffff:127.0.0.1", xff("203.0.113.9"), LOOPBACK, "203.0.113.9"),
        # junk a trusted proxy passed on is one "unknown" client, never a fresh key per request
        ("10.1.2.3", xff("junk"), BALANCER, "unknown"),
        ("10.1.2.3", [(b"forwarded", b"for=unknown")], BALANCER, "unknown"),
    ],
)
def test_the_client_is_the_first_untrusted_hop_from_the_right(
    peer: str, headers: list[tuple[bytes, bytes]], trusted: list[str], client: str
) -> None:
    assert client_address(peer, headers, trusted) == client


ACCEPT = 'mutation { acceptInvitation(code: "nope") { token } }'


async def _limited_after(app: object, peer: str, header_of: object, tries: int) -> int:
    """How many of `tries` acceptInvitation calls from `peer` (headers by try) were answered
    before the first RATE_LIMITED."""
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://outlive.test") as client:
        for n in range(tries):
            headers = header_of(n)  # type: ignore[operator]
            body = (await client.post("/graphql", json={"query": ACCEPT}, headers=headers)).json()
            if body["errors"][0]["extensions"]["code"] == "RATE_LIMITED":
                return n
    return tries


async def test_accept_invitation_is_limited_per_client_with_and_without_a_proxy(
    servers: Servers,
) -> None:
    settings = make_settings(servers, rate_accept_invitation="3/60", trusted_proxies="10.0.0.0/8")
    app = build_app(settings, serve_web=False)
    async with app.router.lifespan_context(app):
        # direct: rotating X-Forwarded-For buys nothing
        direct = await _limited_after(
            app, "198.51.100.7", lambda n: {"x-forwarded-for": f"203.0.113.{n}"}, 10
        )
        # behind the balancer: each client has its own bucket...
        first = await _limited_after(
            app, "10.0.0.5", lambda n: {"x-forwarded-for": "192.0.2.1"}, 10
        )
        second = await _limited_after(
            app, "10.0.0.5", lambda n: {"x-forwarded-for": "192.0.2.2"}, 10
        )
        # ...and a client that forges the left of the header is still itself
        forged = await _limited_after(
            app, "10.0.0.5", lambda n: {"x-forwarded-for": f"9.9.9.{n}, 192.0.2.3"}, 10
        )
    assert (direct, first, second, forged) == (3, 3, 3, 3)
