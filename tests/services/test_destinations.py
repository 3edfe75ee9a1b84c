"""Which addresses a webhook may reach: public unicast only, and no IPv4 hidden in an IPv6 form."""

from __future__ import annotations

import ipaddress

import pytest

from outlive.services.destinations import NOT_ALLOWED, UnsafeDestination, is_public, resolve_public


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "2a00:1450::1"])
def test_public_addresses_pass(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.0.0.1", "100.64.0.1", "169.254.169.254", "224.0.0.1", "0.0.0.0",  # noqa: S104
        "::1", "fe80::1", "fc00::1", "ff02::1",
        "::7f00:1",  # IPv4-compatible ::127.0.0.1
        "::808:808",  # IPv4-compatible, even of a public address: the whole range is refused
        "::ffff:127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::808:808", "64:ff9b:1::7f00:1",
        "2002:7f00:1::", "2002:808:808::",  # 6to4
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
        "::ffff:0:7f00:1", "::ffff:0:808:808",  # SIIT, IPv4-translated (issue 39, I4)
    ],
)  # fmt: skip
def test_private_and_ipv4_embedding_addresses_are_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "url", ["http://[::127.0.0.1]/", "http://0x7f000001/", "http://no-such-host.invalid/"]
)
async def test_every_refusal_reads_the_same(url: str) -> None:
    with pytest.raises(UnsafeDestination) as refused:
        await resolve_public(url, allow_private=False)
    assert refused.value.message == NOT_ALLOWED
