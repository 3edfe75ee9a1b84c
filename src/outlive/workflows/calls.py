"""Calling a step's function: its policy (retries, timeout, limit) and the cancel that interrupts.

`Interrupts` is one attempt's side of a cancel request. A request is pushed to the attempt (the
worker LISTENs for it, `outlive.jobs.cancels`; the heartbeat finds it too, as a fallback) and
`request()` cancels the step function being awaited, unless that step is shielded: the step
records nothing and the attempt raises `RunCancelled`. A shielded step runs to its end and is
recorded; the cancel then wins at the next checkpoint, or at the settle (an attempt's success is
fenced on no cancel having been requested: `queries.SETTLE_SUCCESS`).

`call` runs the function once, or under its `Retry` policy: a failure that a retry can fix is
retried inside the attempt after the policy's backoff (or the `Retry-After` the failure carries),
waiting on the cancel request, so a cancel during a backoff is seen at once as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from outlive.agents.policy import Expected, Retry, is_retryable, retry_after_of
from outlive.errors import RunCancelled
from outlive.ids import TenantId
from outlive.services.limits import Reservation


class Limits(Protocol):
    """Named limits shared across workers (`outlive.services.limits`)."""

    async def acquire(
        self, tenant_id: TenantId, name: str, *, tokens: int | None = None
    ) -> Reservation:
        """Wait until one request of `name` is allowed for the tenant (and globally), with
        `tokens` reserved of its token limits, or raise `LimitWait` when that is too far away to
        wait for in-process."""

    async def settle(self, reservation: Reservation, used: int | None) -> None:
        """The call is over: its reservation becomes `used` tokens (None: unknown)."""


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """What a step declared: `retry` (None: one call), `timeout` per call (seconds), `shield`
    (a cancel waits for it), `limit` (a named limit taken before each call), `reserve` (the
    usage each call may record, its prompt and output cap, reserved of the limit's token rates
    and of the run's budgets before it starts; None: the limit's default), `drain` (a worker
    that stops lets it finish, within its grace, before it hands the run back)."""

    retry: Retry | None = None
    timeout: float | None = None
    shield: bool = False
    limit: str | None = None
    reserve: Expected | None = None
    drain: bool = False

    def __post_init__(self) -> None:
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError("a step's timeout is positive (or None: none)")
        if self.limit is not None and not 0 < len(self.limit) <= 64:
            raise ValueError("a limit's name is 1 to 64 characters")


class Interrupts:
    """One attempt's cancel request, and the step function it would interrupt."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self._current: asyncio.Future[Any] | None = None
        self._shielded = False

    def request(self) -> None:
        """A cancel was requested: interrupt the step being awaited (not a shielded one)."""
        self.requested.set()
        if self._current is not None and not self._shielded:
            self._current.cancel()

    async def await_step(self, awaitable: Any, *, shield: bool) -> Any:
        """Await a step function's awaitable as a task of its own, which `request()` cancels;
        `RunCancelled` when it did (and nothing else cancelled this task meanwhile)."""
        if self.requested.is_set() and not shield:
            _close(awaitable)
            raise RunCancelled()
        inner = asyncio.ensure_future(awaitable)
        self._current, self._shielded = inner, shield
        try:
            return await inner
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if inner.cancelled() and self.requested.is_set() and not _cancelling(task):
                raise RunCancelled() from None
            raise
        finally:
            self._current = None

    async def pause(self, seconds: float) -> None:
        """Wait `seconds` and never less, or raise `RunCancelled` as soon as a cancel is
        requested. A loop's timer may fire early (uvloop's clock is cached per iteration, and
        rounded to the millisecond), so the monotonic clock is read again after it."""
        await self.until(time.monotonic() + seconds)

    async def until(self, end: float, *, fine_s: float = 0.0) -> None:
        """`pause` until the monotonic clock reads `end`; the last `fine_s` of it pass by
        yielding to the loop, turn by turn, instead of on a timer (a due time met to the loop's
        turn, not to a timer's millisecond)."""
        while (left := end - time.monotonic()) > 0:
            if left <= fine_s:
                await asyncio.sleep(0)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left - fine_s):
                        await self.requested.wait()
            if self.requested.is_set():
                raise RunCancelled()


def _cancelling(task: asyncio.Task[Any] | None) -> bool:
    return task is not None and task.cancelling() > 0


def _close(awaitable: Any) -> None:
    if inspect.iscoroutine(awaitable):
        awaitable.close()


async def call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    policy: StepPolicy | None,
    interrupts: Interrupts,
    limits: Limits | None,
    tenant_id: TenantId,
    reset: Callable[[], None],
    retrying: Callable[[Exception, int, float], Awaitable[None]] | None = None,
) -> tuple[Any, Reservation | None]:
    """`fn(*args, **kwargs)`, interruptible by a cancel, under `policy`: its value, and what the
    call that made it reserved of the named limit (None: no limit), for the caller to settle
    with the usage it recorded. A failed call keeps its reservation. `reset()` is called before
    every call after the first (what a failed call buffered is dropped); `retrying(exc,
    failures, delay)` once a failed call is to be called again after `delay` seconds."""
    if interrupts.requested.is_set() and not (policy is not None and policy.shield):
        raise RunCancelled()  # requested between steps: this one does not start
    if policy is None:
        return await _once(fn, args, kwargs, interrupts, shield=False), None
    retry = policy.retry or Retry(attempts=1)
    failures = 0
    while True:
        reservation = None
        if policy.limit is not None and limits is not None:  # a wait a cancel interrupts
            tokens = None if policy.reserve is None else policy.reserve.tokens
            taking = limits.acquire(tenant_id, policy.limit, tokens=tokens)
            reservation = await interrupts.await_step(taking, shield=False)
        try:
            if policy.timeout is None:
                value = await _once(fn, args, kwargs, interrupts, shield=policy.shield)
            else:
                async with asyncio.timeout(policy.timeout):
                    value = await _once(fn, args, kwargs, interrupts, shield=policy.shield)
            return value, reservation
        except Exception as exc:
            failures += 1
            if failures >= retry.attempts or not is_retryable(exc):
                raise
            delay = retry.delay(failures, retry_after_of(exc))
            if retrying is not None:
                await retrying(exc, failures, delay)
        reset()
        await interrupts.pause(delay)


async def _once(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    interrupts: Interrupts,
    *,
    shield: bool,
) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        value = await interrupts.await_step(value, shield=shield)
    return value
