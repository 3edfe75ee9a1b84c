"""Email addresses a tenant gives us to write to: one mailbox, parsed strictly.

An invitation's address is a tenant's input that ends up in an SMTP envelope and a `To:` header,
so anything a mail library or a mail server could read as more than one mailbox is refused
before it is stored or counted: a `,` or `;` (a second recipient), `<>` and display names,
quoted local parts, comments `()`, IP literals `[…]` and bare IP domains, source routes (`%`,
`!`, `:`), whitespace and control characters. What is left is one RFC 5322 addr-spec in its
plain form (`dot-atom@hostname`):

- the local part is a dot-atom of ASCII `atext` (letters, digits and ``#$&'*+-/=?^_`{|}~``),
  at most 64 characters, no leading, trailing or doubled dot;
- the domain is a host name of at least two labels (letters, digits, inner hyphens; IDNA
  labels are turned into their `xn--` form), whose last label is not numeric, at most 253
  characters.

`parse_address` hands back the address normalized (lowercase, IDNA domain): it is what is
stored, what the mail goes to, and what `recipient_key` (the per-address rate limit) is made of.
"""

from __future__ import annotations

import re

from outlive.errors import BadUserInput

MAX_ADDRESS = 254
MAX_LOCAL = 64
MAX_DOMAIN = 253

# RFC 5322 atext without `!` and `%` (old source-routing syntaxes some relays still honour).
_ATOM = r"[A-Za-z0-9#$&'*+\-/=?^_`{|}~]+"
_LOCAL = re.compile(rf"{_ATOM}(?:\.{_ATOM})*")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def parse_address(text: str) -> str:
    """The one mailbox `text` names (surrounding blanks ignored), normalized; `BadUserInput` for
    anything else."""
    if not isinstance(text, str):
        raise _invalid(text)
    text = text.strip()
    if len(text) > MAX_ADDRESS or text.count("@") != 1:
        raise _invalid(text)
    local, domain = text.split("@")
    if len(local) > MAX_LOCAL or not _LOCAL.fullmatch(local):
        raise _invalid(text)
    return f"{local.lower()}@{_hostname(text, domain)}"


# Domains whose mailboxes ignore dots in the local part (`t.arget@` is `target@`), and their
# aliases of one another.
_DOTLESS = {"gmail.com": "gmail.com", "googlemail.com": "gmail.com"}


def recipient_key(address: str) -> str:
    """What the per-recipient rate limit counts: the parsed address without a `+tag` (plus
    addressing delivers `a+1@x`, `a+2@x`, … to the same inbox as `a@x`), and, for the domains
    that ignore them (Gmail), without dots."""
    local, _, domain = parse_address(address).partition("@")
    local = local.split("+", 1)[0] or local
    if domain in _DOTLESS:
        local, domain = local.replace(".", "") or local, _DOTLESS[domain]
    return f"{local}@{domain}"


def _hostname(text: str, domain: str) -> str:
    try:
        ascii_domain = domain.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise _invalid(text) from None
    labels = ascii_domain.split(".")
    if (
        len(ascii_domain) > MAX_DOMAIN
        or len(labels) < 2
        or not all(_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()  # 10.0.0.1, or any bare IP-looking domain
    ):
        raise _invalid(text)
    return ascii_domain


def _invalid(text: object) -> BadUserInput:
    shown = text[:100] if isinstance(text, str) else type(text).__name__
    return BadUserInput(
        f"{shown!r} is not a valid email address (one address, name@example.com, no display "
        "name, quotes, comments or IP literal)"
    )
