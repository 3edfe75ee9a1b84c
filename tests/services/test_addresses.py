"""An invitation's address is one mailbox, parsed strictly: anything a mail library or a mail
server could read as a second recipient (or as a route elsewhere) is refused (issue 19, item 1)."""

from __future__ import annotations

import pytest

from outlive.errors import BadUserInput
from outlive.services.addresses import parse_address, recipient_key


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("someone@example.com", "someone@example.com"),
        ("  New.Person@Example.COM ", "new.person@example.com"),
        ("o'brien+invites@mail.example.org", "o'brien+invites@mail.example.org"),
        ("a_b-c=d@x-y.example", "a_b-c=d@x-y.example"),
        ("user@bücher.example", "user@xn--bcher-kva.example"),
    ],
)
def test_one_plain_mailbox_is_accepted_and_normalized(given: str, parsed: str) -> None:
    assert parse_address(given) == parsed


@pytest.mark.parametrize(
    "given",
    [
        "x0,target@victim.test",  # a second recipient for a To:-reading mail library
        "postmaster,admin@victim.test",  # RCPT TO:<postmaster>
        "a@x.test,target@victim.test",
        "a@x.test;target@victim.test",
        "Name <target@victim.test>",  # a display name
        "<target@victim.test>",
        '"target@victim.test"@x.test',  # a quoted local part
        '"a b"@x.test',
        "target(comment)@victim.test",
        "target@[127.0.0.1]",  # IP literals
        "target@[IPv6:::1]",
        "target@127.0.0.1",
        "target%victim.test@relay.test",  # source routes
        "victim.test!target@relay.test",
        "@relay.test:target@victim.test",
        "target@victim.test\r\nBcc: other@victim.test",
        "tar get@victim.test",
        "target@victim",  # one label
        "target@victim.test.",
        ".target@victim.test",
        "tar..get@victim.test",
        "target@-victim.test",
        "target@victim_.test",
        "tärget@victim.test",  # non-ASCII local part: needs SMTPUTF8, which we do not speak
        "a" * 65 + "@victim.test",
        "t@" + "a" * 250 + ".test",
        "",
        "@",
        "no-at-sign",
        "a@b@victim.test",
    ],
)
def test_anything_but_one_plain_mailbox_is_refused(given: str) -> None:
    with pytest.raises(BadUserInput, match="not a valid email address"):
        parse_address(given)


def test_the_rate_limit_key_ignores_case_blanks_and_plus_tags() -> None:
    keys = {
        recipient_key(a)
        for a in (
            "target@victim.test",
            " Target@VICTIM.test",
            "target+1@victim.test",
            "TARGET+x@victim.test",
        )
    }
    assert keys == {"target@victim.test"}
    assert recipient_key("other@victim.test") != recipient_key("target@victim.test")
