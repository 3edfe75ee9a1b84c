"""The fuzzer's cases for the security review's round 4, L4 and I7: any `waitId` a client sends
with `signalRun`, and any URL an agent's `ctx.public_http` is asked for. Each answer: no 5xx,
no ERROR line; a bound signal is never kept, and no refused URL reaches the network."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from outlive.services import destinations
from tests.fuzz.conftest import Errors, budget, check_answer
from tests.support import Api, TenantHandle

pytestmark = pytest.mark.timeout(300)

SIGNAL = """mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted run { waitId } } }"""
WAIT_IDS = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"wait-[0-9]{0,12}", fullmatch=True),
    st.integers(-(2**40), 2**40).map(lambda n: f"wait-{n}"),
)


@budget(120)
@given(wait_id=WAIT_IDS, name=st.sampled_from(["approval", "other", "x" * 128]))
async def test_round4_l4_any_wait_id(
    api: Api, tenant: TenantHandle, errors: Errors, wait_id: str, name: str
) -> None:
    """A QUEUED run (no worker here) has begun no wait: every bound signal is refused as input,
    and nothing is kept for a later wait."""
    started = await api.start_run(tenant.token, "demo", {"turns": 1, "awaitSignal": "approval"})
    variables: dict[str, Any] = {"i": {"id": started["run"]["id"], "name": name, "waitId": wait_id}}
    response = await api.post(SIGNAL, variables, token=tenant.token)
    check_answer(response)
    answer = response.json()
    if answer.get("data"):
        assert answer["data"]["signalRun"]["accepted"] is False
    else:
        codes = {e["extensions"]["code"] for e in answer["errors"]}
        assert codes <= {"BAD_USER_INPUT", "RATE_LIMITED"}, answer


HOSTS = st.one_of(
    st.sampled_from(
        [
            "127.0.0.1",
            "localhost",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "[64:ff9b::a00:1]",
            "169.254.169.254",
            "10.0.0.1",
            "0.0.0.0",  # noqa: S104 (a destination refused, not a bind)
            "2130706433",
            "0x7f000001",
            "[fe80::1]",
            "224.0.0.1",
        ]
    ),
    st.ip_addresses()
    .filter(lambda ip: not ip.is_global)
    .map(lambda ip: f"[{ip}]" if ip.version == 6 else str(ip)),
)


@budget(150)
@given(
    scheme=st.sampled_from(["http", "https", "ftp", "file", ""]),
    host=HOSTS,
    rest=st.text(alphabet="/?#:@%a1", max_size=12),
)
async def test_round4_i7_no_private_url_reaches_the_network(
    scheme: str, host: str, rest: str
) -> None:
    reached: list[httpx.Request] = []
    fake = httpx.MockTransport(lambda request: reached.append(request) or httpx.Response(200))
    guard = destinations.GuardedTransport(fake, tenant="fuzz", allow_private=False)
    async with httpx.AsyncClient(transport=guard) as client:
        refused = (destinations.UnsafeDestination, httpx.HTTPError, httpx.InvalidURL, ValueError)
        with contextlib.suppress(*refused):
            await client.get(f"{scheme}://{host}{rest}")
    assert reached == [], [str(r.url) for r in reached]
