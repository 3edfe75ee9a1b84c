"""Sending email: SMTP through aiosmtplib, or the log when `OUTLIVE_SMTP_URL` is unset.

An invitation's link carries its code, a credential that joins the tenant. The log gets it whole
only under `outlive dev` (`OUTLIVE_MAIL_LOG_LINKS`, which it sets): a production worker that lost
its SMTP setting writes the email with the code withheld, never a credential into the log
aggregator.

The envelope's recipients are always given explicitly (`recipients`): a mail library left to
read them from the `To:` header would find as many mailboxes as the header spells, so an
address that slipped past validation with a `,` in it would mail someone else.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import aiosmtplib

from outlive.config import Settings

log = logging.getLogger(__name__)


class Mailer(Protocol):
    async def send(self, message: EmailMessage, *, recipients: Sequence[str]) -> None:
        """Send `message` to exactly `recipients` (the SMTP envelope), whatever its headers say."""


_CODE = re.compile(r"(#invitation=)[^&\s]+")
WITHHELD = r"\1<withheld: a credential>"


class LogMailer:
    """Development default: the message goes to the log, nothing leaves the machine. Its
    invitation codes are withheld unless `links` (`outlive dev`)."""

    def __init__(self, *, links: bool = False) -> None:
        self.links = links
        withheld = "" if links else ", their invitation links withheld (credentials)"
        log.info("OUTLIVE_SMTP_URL is unset: emails go to the log%s", withheld)
        self.sent: list[EmailMessage] = []

    async def send(self, message: EmailMessage, *, recipients: Sequence[str]) -> None:
        self.sent.append(message)
        del self.sent[:-100]
        content = message.get_content()
        if self.links:
            log.info("email to %s: %s\n%s", ", ".join(recipients), message["Subject"], content)
            return
        log.warning(  # nobody will get this email: say so where an operator looks
            "email to %s only logged, OUTLIVE_SMTP_URL is unset: %s\n%s",
            ", ".join(recipients),
            message["Subject"],
            _CODE.sub(WITHHELD, content),
        )


class SmtpMailer:
    """`smtp://[user:password@]host:port[?starttls=1]` (or `smtps://` for implicit TLS)."""

    def __init__(self, url: str, timeout_s: float = 10) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
            raise ValueError("OUTLIVE_SMTP_URL must be smtp://host:port or smtps://host:port")
        query = parse_qs(parts.query)
        self._options = {
            "hostname": parts.hostname,
            "port": parts.port or (465 if parts.scheme == "smtps" else 25),
            "username": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "use_tls": parts.scheme == "smtps",
            "start_tls": query.get("starttls", ["0"])[0] in ("1", "true", "yes"),
            "timeout": timeout_s,
        }

    async def send(self, message: EmailMessage, *, recipients: Sequence[str]) -> None:
        if not recipients:
            raise ValueError("an email needs at least one recipient")
        await aiosmtplib.send(
            message,
            recipients=list(recipients),  # never the To: header's reading of itself
            **self._options,  # type: ignore[arg-type]
        )


def create_mailer(settings: Settings) -> Mailer:
    if settings.smtp_url is None:
        return LogMailer(links=settings.mail_log_links)
    return SmtpMailer(settings.smtp_url.get_secret_value())
