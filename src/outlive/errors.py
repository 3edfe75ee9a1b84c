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


class Forbidden(DomainError):
    """The token's role may not do this (contract §3 "roles"): nothing was changed."""

    code = "FORBIDDEN"


class RateLimited(DomainError):
    """Too many of these, too fast: nothing was changed; try again in `retry_after` seconds."""

    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def extensions(self) -> dict[str, object]:
        return {"retryAfter": self.retry_after}


class QueryTimeout(DomainError):
    """A statement ran past the API's `statement_timeout` (`OUTLIVE_API_STATEMENT_TIMEOUT_S`) and
    was cancelled by PostgreSQL: nothing was changed; ask for less (a shorter window, a page)."""

    code = "QUERY_TIMEOUT"

    def __init__(self, message: str = "the statement took too long and was cancelled") -> None:
        super().__init__(message)


class RunActive(DomainError):
    """`startRun` with `onConflict: REJECT` met an active run of its key: nothing was written;
    `extensions.runId` names that run (contract §3)."""

    code = "RUN_ACTIVE"

    def __init__(self, run_id: object, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id

    @property
    def extensions(self) -> dict[str, object]:
        return {"runId": str(self.run_id)}


class IdempotencyConflict(DomainError):
    """`startRun` reused an `idempotencyKey` within its 24 h with a different agent, input, key
    or tags: nothing was written; `extensions.runId` names the first run (contract §3)."""

    code = "IDEMPOTENCY_CONFLICT"

    def __init__(self, run_id: object, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id

    @property
    def extensions(self) -> dict[str, object]:
        return {"runId": str(self.run_id)}


class QueueUnavailable(DomainError):
    """The row was written but the work could not be handed off; the row records it."""

    code = "QUEUE_UNAVAILABLE"


class ServiceUnavailable(DomainError):
    """PostgreSQL cannot be reached (down, restarting, or every pooled connection busy past the
    pool's timeout): nothing was changed; try again in `retry_after` seconds. Raised by the db
    layer (`outlive.db.drivers.reaching`) in place of the drivers' connection failures, so that
    nothing above it knows asyncpg's or SQLAlchemy's ways of saying so; HTTP 503."""

    code = "SERVICE_UNAVAILABLE"

    def __init__(self, message: str = "PostgreSQL cannot be reached", retry_after: int = 2) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def extensions(self) -> dict[str, object]:
        return {"retryAfter": self.retry_after}


class RetryableFault(Exception):
    """Raised by an agent for a fault that a later attempt can fix (429, 5xx, a timeout).
    `status`: the HTTP status that said so, when one did (the `retrying` event shows it)."""

    def __init__(self, *args: object, status: int | None = None) -> None:
        super().__init__(*args)
        self.status = status


class RetryAfter(RetryableFault):
    """A retryable fault that says when to try again: inside a step with a `Retry` policy, the
    next call waits `seconds` (instead of the policy's backoff); once the policy is used up (or
    without one), the run's next attempt waits at least that long."""

    def __init__(self, seconds: float, message: str = "", *, status: int | None = None) -> None:
        super().__init__(message or f"retry after {seconds:g}s", status=status)
        self.seconds = max(0.0, float(seconds))


class RunCancelled(Exception):
    """Raised inside a run when its cancel request is seen at a turn boundary."""


class RunSuperseded(Exception):
    """This attempt no longer holds the run: it settled, or a newer attempt claimed it."""


class StepTooLarge(Exception):
    """A durable step's result is over the journal's inline limit: nothing was recorded, and the
    run fails without a retry (the same code would only produce the same value again)."""


class JournalTooLarge(Exception):
    """A run's step journal (its recorded results, which every attempt loads) would be over
    `OUTLIVE_RUN_JOURNAL_MAX_BYTES`: the run fails without a retry, nothing more recorded."""


class StepResultInvalid(Exception):
    """A durable step's result cannot be recorded as JSON (or its return annotation cannot be
    resolved): nothing was recorded, and the run fails without a retry."""


class ChildFailed(Exception):
    """A child run (`ctx.call`, `ctx.spawn`, `ctx.map`) settled FAILED or CANCELLED: raised in
    its parent, carrying the child's id, status and error."""

    def __init__(self, child_id: object, status: str, error: str | None) -> None:
        super().__init__(f"child run {child_id} {status.lower()}: {error or 'no error given'}")
        self.child_id = child_id
        self.status = status
        self.error = error


class LimitWait(Exception):
    """A step's named limit would make it wait `seconds`, longer than `OUTLIVE_LIMIT_PARK_S`:
    the step's call is not made, and the run parks WAITING until then (`ctx.step`)."""

    def __init__(self, name: str, seconds: float) -> None:
        super().__init__(f"limit {name!r}: {seconds:.1f} s to wait")
        self.name = name
        self.seconds = seconds


class RunParked(Exception):
    """The run is WAITING now (a durable sleep, a wait for a signal): this attempt ends, and
    frees its worker slot, without settling the run. Raised by `ctx.sleep` and `ctx.wait_for`;
    an agent must let it through."""
