"""What one API request may take of the shared read path: a tenant's share, and a byte budget.

The API's pool of connections, PostgreSQL's CPU and the process's memory are shared by every
tenant. An operation is bounded in objects by its cost (`outlive.graphql.limits`), but not in
bytes (a JSON field is up to 64 KiB) nor in time. So every statement a request runs on the raw
pool goes through the request's `ReadScope` (set by the pipeline, see `scoped`; applied by
`outlive.db.drivers`, around each statement):

- **the tenant's gate**: at most `OUTLIVE_API_TENANT_MAX_READS` of one tenant's statements run
  at once in a process; the others wait for one of its own slots, never for another tenant's;
- **the byte budget**: the rows a request fetched are counted (the size of their values, their
  JSON included) against `OUTLIVE_MAX_RESPONSE_BYTES`; past it, the statement that went over and
  every later one raise `ResponseTooLarge`, and the pipeline answers that error alone (never
  a truncated answer). A statement is refused before it runs once the budget is spent, so a
  request holds at most its budget plus the pages already in flight.

Outside a request (a worker, a command), no scope is set and nothing is counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from outlive.errors import BadUserInput


class ResponseTooLarge(BadUserInput):
    """The answer would be larger than `OUTLIVE_MAX_RESPONSE_BYTES`: nothing is answered but
    this error (ask for fewer items, or for fewer JSON fields)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the answer is larger than {limit} bytes (OUTLIVE_MAX_RESPONSE_BYTES):"
            " ask for fewer items or fields"
        )
        self.limit = limit


@dataclass(slots=True)
class ReadScope:
    """One request's share: its tenant's gate (None: no gate) and what it fetched so far."""

    gate: asyncio.Semaphore | None
    max_bytes: int | None
    used: int = 0
    over: bool = False

    def check(self) -> None:
        if self.over:
            assert self.max_bytes is not None  # noqa: S101 (over only with a budget)
            raise ResponseTooLarge(self.max_bytes)

    def charge(self, rows: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None) -> bool:
        """Count `rows`; True when the budget is spent now. The caller drops the rows before it
        calls `check` (which raises): a raised error keeps its frames, and with them whatever
        they hold, until the answer is made."""
        if self.max_bytes is not None and rows is not None:
            self.used += size_of(rows)
            self.over = self.over or self.used > self.max_bytes
        return self.over


_scope: ContextVar[ReadScope | None] = ContextVar("outlive_read_scope", default=None)


@dataclass(slots=True)
class TenantGates:
    """One semaphore per tenant with reads in flight in this process (dropped when idle)."""

    size: int
    _gates: dict[UUID, tuple[asyncio.Semaphore, int]] = field(default_factory=dict)

    @asynccontextmanager
    async def held(self, tenant_id: UUID) -> AsyncIterator[asyncio.Semaphore]:
        gate, users = self._gates.get(tenant_id, (None, 0))
        if gate is None:
            gate = asyncio.Semaphore(self.size)
        self._gates[tenant_id] = (gate, users + 1)
        try:
            yield gate
        finally:
            gate, users = self._gates[tenant_id]
            if users <= 1:
                del self._gates[tenant_id]
            else:
                self._gates[tenant_id] = (gate, users - 1)


@contextmanager
def scoped(scope: ReadScope) -> Iterator[ReadScope]:
    """The block's statements (and the tasks it starts) read within `scope`."""
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current() -> ReadScope | None:
    return _scope.get()


# Values a row holds that count a fixed 8 bytes: tested by type, not `isinstance`, since a
# request's rows are counted value by value (every statement's, a write's too).
_FIXED = frozenset({int, float, bool, type(None), UUID, datetime, date, timedelta, Decimal})


def size_of(value: Any) -> int:
    """About the bytes `value` takes in a JSON answer (strings by length, containers summed)."""
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value) + 2
    if kind in _FIXED:
        return 8
    if isinstance(value, list | tuple):
        return sum(size_of(v) + 1 for v in value) + 2
    items = getattr(value, "items", None)
    if items is not None and callable(items):  # a mapping, or an asyncpg Record
        total = 2
        for key, item in items():
            kind = type(item)
            total += len(str(key)) + 4
            total += len(item) + 2 if kind is str else 8 if kind in _FIXED else size_of(item)
        return total
    if isinstance(value, str | bytes):
        return len(value) + 2
    return 8
