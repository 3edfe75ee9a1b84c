"""Domain errors. Each carries the contract's `extensions.code` (§3); nothing here knows GraphQL."""

from __future__ import annotations


class DomainError(Exception):
    """An error the caller may see, with a stable code."""

    code = "INTERNAL_SERVER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def extensions(self) -> dict[str, object]:
        """What the GraphQL error carries in `extensions` beside `code`."""
        return {}


class BadUserInput(DomainError):
    code = "BAD_USER_INPUT"


class NotFound(DomainError):
    code = "NOT_FOUND"


class Unauthenticated(DomainError):
    code = "UNAUTHENTICATED"


class RateLimited(DomainError):
    """Too many of these, too fast: nothing was changed; try again in `retry_after` seconds."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def extensions(self) -> dict[str, object]:
        return {"retryAfter": self.retry_after}


class QueueUnavailable(DomainError):
    """The row was written but the work could not be handed off; the row records it."""

    code = "QUEUE_UNAVAILABLE"


class RetryableFault(Exception):
    """Raised by an agent for a fault that a later attempt can fix (429, 5xx, a timeout)."""


class RunCancelled(Exception):
    """Raised inside a run when its cancel request is seen at a turn boundary."""


class RunSuperseded(Exception):
    """This attempt no longer holds the run: it settled, or a newer attempt claimed it."""
