"""A step's own policy (`ctx.step(name, fn, retry=Retry(...), timeout=..., shield=..., limit=...)`).

`Retry` says how often a step's function is called again, inside the same attempt, after a
failure that a retry can fix, and how long to wait between calls: exponential backoff from
`backoff` seconds, capped at `max_backoff`, with jitter (each wait is drawn between half and all
of it, so workers that failed together do not come back together). A `RetryAfter(seconds)` (or an
`httpx.HTTPStatusError` for a 429 or 503 carrying `Retry-After`) sets the next wait instead. What a
retry can fix: `RetryableFault` (and so `RetryAfter`), `TimeoutError` (the step's `timeout`
included), `httpx.TransportError`, and an `httpx.HTTPStatusError` for a 429 or a 5xx. Anything else
fails at once, as without a policy. When the calls are used up, the last failure is raised to the
run as before: a retryable one uses up one of the run's retries (the run's own budget takes over).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from outlive.errors import RetryableFault, RetryAfter

__all__ = ["Expected", "Retry", "RetryAfter", "is_retryable", "retry_after_of", "status_of"]


@dataclass(frozen=True, slots=True)
class Expected:
    """The usage a step may record, reserved before it starts (`ctx.step(..., reserve=)`): of its
    named limit's token rates, and of every budget that applies to the run (tokens, and USD
    when `model` is priced). For a model call: its prompt's tokens and its output cap."""

    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Retry:
    """At most `attempts` calls of the step's function in one attempt of the run."""

    attempts: int = 3
    backoff: float = 1.0
    max_backoff: float = 60.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a Retry makes at least 1 call")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("a Retry's backoff is not negative")

    def delay(self, failures: int, hint: float | None = None) -> float:
        """The wait before the next call, after `failures` failed calls (1 for the first)."""
        if hint is not None:
            return hint  # the server said when: honoured as given
        base = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
        spread = random.uniform(0.5, 1.0) if self.jitter else 1.0  # noqa: S311 (jitter)
        return float(base * spread)


def is_retryable(exc: BaseException) -> bool:
    """A failure that calling again may fix."""
    if isinstance(exc, RetryableFault | TimeoutError | httpx.TransportError):
        return True
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status == 429 or status >= 500
    return False


def status_of(exc: BaseException) -> int | None:
    """The HTTP status a failure carries, if any (a `RetryableFault`'s, an `HTTPStatusError`'s)."""
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def retry_after_of(exc: BaseException) -> float | None:
    """The wait a failure asks for: `RetryAfter.seconds`, or an HTTP 429/503's `Retry-After`
    (seconds or an HTTP date); None when it asks for none."""
    if isinstance(exc, RetryAfter):
        return exc.seconds
    if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in (429, 503):
        return parse_retry_after(exc.response.headers.get("retry-after"))
    return None


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date; None when absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
