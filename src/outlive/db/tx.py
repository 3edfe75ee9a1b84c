"""The unit of work: one session, one commit, side effects only after it.

A request or a job opens one unit (`Sessions.unit`), does its writes, and leaves the block. Leaving
normally commits, closes the session (the connection goes back to the pool), and only then runs
what was collected: `after_commit` callbacks in order (starting run instances), the jobs queued
with `enqueue` (validated when queued, sent after the commit), then the nudges, handed to the sink
in one call. Leaving with an exception rolls back and drops all of it, so a job or a nudge can
never announce a row that does not exist. Nothing else in the code base calls `commit()`. What
runs after the commit is shielded: a caller cancelled meanwhile (a worker stopping mid-step) still
sends what its commit promised, then sees the cancellation. On the raw pool, where a statement
commits itself, a cancellation that lands while the statement runs is held until the end of the
unit for the same reason.

When the jobs queue cannot be reached after the commit, each job's `on_unavailable` records that
on its row in a follow-up unit, and `QueueUnavailable` propagates to the caller: the row says what
happened, nothing is silently lost, and nothing ever runs inline instead. A job queued with
`outbox=True` serves a row that is its own outbox (a PENDING webhook delivery): the row is
re-enqueued when it is read, so an unreachable queue (or a process killed between the commit and
the enqueue) loses nothing and fails nothing; such a job never makes the unit raise.

Every statement runs through one interface, `Db` (`one`, `all`, `execute`), which `Sessions`,
`StatementUnit` and `UnitOfWork` implement; which driver runs it (the raw asyncpg pool or the
SQLAlchemy session of the transaction) is decided here, nowhere else. `Db` and the ports a unit
is handed (`JobProducer`, `Admission`, the nudge sink) are declared in `outlive.db.ports`; they
are re-exported here, where their users have always imported them from. A unit is given the
ports of its `Sessions` and is how a service uses them: `enqueue` (the jobs queue),
`admit_after_commit` (admission) and `limits` (the caps admission applies); no service reaches
for them past the unit.

The nudge sink is chosen by the composition root: on the request path it schedules the publish
in the background (never awaited on the response path); in a worker it is awaited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, TypeVar, overload
from uuid import UUID

import asyncpg
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from outlive.db import drivers
from outlive.db.drivers import Query as Query
from outlive.db.drivers import Row as Row
from outlive.db.ports import NO_ADMISSION, NO_JOBS
from outlive.db.ports import Admission as Admission
from outlive.db.ports import Db as Db
from outlive.db.ports import JobProducer as JobProducer
from outlive.db.ports import Limits as Limits
from outlive.db.ports import NudgeSink as NudgeSink
from outlive.db.ports import PendingNudge as PendingNudge
from outlive.db.ports import drop_nudges as drop_nudges
from outlive.db.raw import Statement
from outlive.errors import QueueUnavailable
from outlive.telemetry import logs

log = logging.getLogger(__name__)

AfterCommit = Callable[[], Awaitable[None]]
T = TypeVar("T")


OnUnavailable = Callable[["UnitOfWork"], Awaitable[None]]
AdmissionFactory = Callable[["Sessions"], Admission]
Admitted = Callable[[Sequence[UUID]], None]


def unwired_admission(_: Sessions) -> Admission:
    """The admission of sessions built without queues (`NO_ADMISSION`)."""
    return NO_ADMISSION


class Unit:
    """What every unit of work has: its tenant, the side effects it sends after its commit, and
    the `Db` methods (over prepared statements). `StatementUnit` and `UnitOfWork` are the two
    kinds; a function that works in either takes a `Unit`."""

    def __init__(self, tenant_id: UUID | None, sessions: Sessions) -> None:
        self.tenant_id = tenant_id
        self.sessions = sessions
        self._producer = sessions.jobs
        self._admission = sessions.admission
        self._after: list[AfterCommit] = []
        self._jobs: list[tuple[Any, OnUnavailable | None, bool]] = []
        self._delays: dict[int, float] = {}  # id(envelope) -> seconds, for jobs due later
        self._nudges: list[PendingNudge] = []
        self._cancelled = False  # a cancellation held back until the unit has announced its work

    async def one(self, statement: Statement, /, **params: Any) -> Row | None:
        raise NotImplementedError

    async def all(self, statement: Statement, /, **params: Any) -> list[Row]:
        raise NotImplementedError

    async def execute(self, statement: Statement, /, **params: Any) -> int:
        raise NotImplementedError

    def require_tenant(self) -> UUID:
        if self.tenant_id is None:
            raise RuntimeError("this unit of work has no tenant")
        return self.tenant_id

    def after_commit(self, callback: AfterCommit) -> None:
        self._after.append(callback)

    @property
    def limits(self) -> Limits:
        """The caps its admission applies (what a statement that may admit is given)."""
        return self._admission.limits

    def admit_after_commit(
        self,
        tenant_id: UUID,
        work: Literal["runs", "jobs"],
        *,
        queue_down_raises: bool,
        then: Admitted | None = None,
    ) -> None:
        """After the commit, admit the tenant's waiting `work` up to its cap (and enqueue it):
        the one "admit after commit" of every service that frees a slot or adds waiting work.
        `queue_down_raises`: an unreachable queue makes the unit raise `QueueUnavailable`;
        otherwise it is logged and the admitted rows wait for the relay. `then` is given the
        ids of the runs admitted."""
        admission = self._admission

        async def admit() -> None:
            try:
                if work == "runs":
                    admitted = await admission.dispatch_runs(tenant_id)
                    if then is not None:
                        then(admitted)
                else:
                    await admission.dispatch_jobs(tenant_id)
            except QueueUnavailable:
                if queue_down_raises:
                    raise
                log.warning("%s of tenant %s wait: the queue is unreachable", work, tenant_id)

        self.after_commit(admit)

    def enqueue(
        self,
        type: str,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        on_unavailable: OnUnavailable | None = None,
        outbox: bool = False,
        delay_s: float = 0.0,
    ) -> Any:
        """Queue a job to be sent after the commit (due `delay_s` later); a malformed one raises
        here, now. Returns the envelope."""
        envelope = self._producer.build(type, payload, key=key)
        self._jobs.append((envelope, on_unavailable, outbox))
        if delay_s > 0:
            self._delays[id(envelope)] = delay_s
        return envelope

    def nudge(self, type: str, id: UUID | None = None, *, tenant_id: UUID | None = None) -> None:
        tenant = tenant_id or self.tenant_id
        if tenant is None:
            raise RuntimeError(f"nudge {type!r} has no tenant: set the unit's tenant first")
        self._nudges.append(PendingNudge(type=type, tenant_id=tenant, id=id))

    async def _after_commit_shielded(self) -> None:
        """What the commit promised goes out even when the caller is cancelled meanwhile (a worker
        stopping mid-step): the work finishes, then the cancellation propagates."""
        if not (self._after or self._jobs or self._nudges):
            return
        work = asyncio.ensure_future(self._run_after_commit())
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            await work
            raise

    async def _run_after_commit(self) -> None:
        failure: BaseException | None = None
        for callback in self._after:
            try:
                await callback()
            except Exception as exc:  # noqa: BLE001 (the rest still runs; the first is re-raised)
                failure = failure or exc
        if self._jobs:
            try:
                await self._send_jobs()
            except Exception as exc:  # noqa: BLE001 (the nudges still go; re-raised below)
                failure = failure or exc
        if self._nudges:
            try:
                await self.sessions.nudge_sink(self._nudges)
            except Exception:
                log.exception("nudge sink failed; clients will refresh on their next fetch")
        if failure is not None:
            raise failure

    async def _send_jobs(self) -> None:
        try:
            now = [envelope for envelope, _, _ in self._jobs if id(envelope) not in self._delays]
            if now:
                await self._producer.send(now)
            for envelope, _, _ in self._jobs:
                if (delay := self._delays.get(id(envelope))) is not None:
                    await self._producer.send([envelope], delay_s=delay)
        except QueueUnavailable:
            for _, record, _ in self._jobs:
                if record is not None:
                    async with self.sessions.unit(self.tenant_id) as follow_up:
                        await record(follow_up)
            if not all(outbox for _, _, outbox in self._jobs):
                raise
            log.warning("the jobs queue is unreachable; %d outbox row(s) wait", len(self._jobs))


class StatementUnit(Unit):
    """A unit whose statements each commit on their own (`Sessions.unit(single_statement=True)`):
    on the raw asyncpg pool when there is one (no session, no BEGIN/COMMIT), on an autocommit
    session otherwise. It takes prepared statements only and has no `session`: a unit that
    writes twice must be a `UnitOfWork`."""

    def __init__(
        self,
        tenant_id: UUID | None,
        sessions: Sessions,
        *,
        raw: asyncpg.Connection | None = None,
        session: AsyncSession | None = None,
    ) -> None:
        super().__init__(tenant_id, sessions)
        self._raw = raw
        self._session = session

    async def _finish(self, running: asyncio.Future[T]) -> T:
        """A statement commits itself: once sent, it finishes, and a cancellation that arrives
        meanwhile waits for the end of the unit, after its nudges and jobs went out. So does one
        that arrives while the unit gives its connection back (asyncpg's release runs in a task of
        its own, shielded: the caller waits on it), after its statements committed."""
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            result = await running
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self._cancelled = True
            return result

    async def one(self, statement: Statement, /, **params: Any) -> Row | None:
        if self._raw is not None:
            return await self._finish(
                asyncio.ensure_future(drivers.raw_one(self._raw, statement, params))
            )
        assert self._session is not None  # noqa: S101 (one of the two is always set)
        return await drivers.session_one(self._session, statement, params)

    async def all(self, statement: Statement, /, **params: Any) -> list[Row]:
        if self._raw is not None:
            return await self._finish(
                asyncio.ensure_future(drivers.raw_all(self._raw, statement, params))
            )
        assert self._session is not None  # noqa: S101 (one of the two is always set)
        return await drivers.session_all(self._session, statement, params)

    async def execute(self, statement: Statement, /, **params: Any) -> int:
        if self._raw is not None:
            return await self._finish(
                asyncio.ensure_future(drivers.raw_execute(self._raw, statement, params))
            )
        assert self._session is not None  # noqa: S101 (one of the two is always set)
        return await drivers.session_execute(self._session, statement, params)


class UnitOfWork(Unit):
    """A transaction (`Sessions.unit()`): every statement runs in its session, committed once.

    `session` is there for the ORM's own unit of work (`add`, `flush`, `get(..., with_for_update)`);
    statements go through `one`, `all` and `execute`, which here also take any SQLAlchemy
    statement."""

    def __init__(self, session: AsyncSession, tenant_id: UUID | None, sessions: Sessions) -> None:
        super().__init__(tenant_id, sessions)
        self.session = session

    async def one(self, statement: Query, /, **params: Any) -> Row | None:
        return await drivers.session_one(self.session, statement, params)

    async def all(self, statement: Query, /, **params: Any) -> list[Row]:
        return await drivers.session_all(self.session, statement, params)

    async def execute(self, statement: Query, /, **params: Any) -> int:
        return await drivers.session_execute(self.session, statement, params)


async def _rolled_back(session: AsyncSession) -> None:
    """Roll back after the unit's block raised. On a connection that is already gone the
    rollback fails too: the block's own exception is what the caller must see, not that one."""
    try:
        await session.rollback()
    except Exception as exc:
        if not drivers.unreachable(exc):
            raise
        log.debug("rollback on a lost connection failed (the transaction is gone with it)")


class Sessions:
    """The session factory every layer receives; built once by a composition root.

    It is a `Db` itself: `one`/`all`/`execute` outside any unit run on an autocommit connection
    (the raw asyncpg pool for prepared statements). `unit()` is a transaction (`UnitOfWork`);
    `unit(single_statement=True)` is a `StatementUnit`, whose statements commit on their own: no
    BEGIN/COMMIT round trips, which halves the cost of a one-statement write (a claim, a timeline
    event, an idempotent insert-or-get). A single statement is atomic on its own; a unit that
    writes twice must stay a transaction.
    """

    def __init__(
        self,
        maker: async_sessionmaker[AsyncSession],
        nudge_sink: NudgeSink = drop_nudges,
        *,
        autocommit_maker: async_sessionmaker[AsyncSession] | None = None,
        jobs: JobProducer = NO_JOBS,
        raw: asyncpg.Pool | None = None,
        admission: AdmissionFactory = unwired_admission,
    ) -> None:
        """Everything is given here, once (`outlive.runtime` builds it): `raw`, the asyncpg pool
        for single statements (None: everything via SQLAlchemy; its owner closes it), and
        `admission`, called with these sessions to build the dispatcher units reach."""
        self.maker = maker
        self.autocommit_maker = autocommit_maker or maker
        self.nudge_sink = nudge_sink
        self.jobs = jobs
        self.raw = raw
        self._admit = admission
        self.admission: Admission = admission(self)

    def wired(
        self, *, nudge_sink: NudgeSink | None = None, jobs: JobProducer | None = None
    ) -> Sessions:
        """New sessions on the same pools with another nudge sink or jobs queue (tests, tools)."""
        return Sessions(
            self.maker,
            nudge_sink or self.nudge_sink,
            autocommit_maker=self.autocommit_maker,
            jobs=jobs or self.jobs,
            raw=self.raw,
            admission=self._admit,
        )

    async def one(self, statement: Query, /, **params: Any) -> Row | None:
        """One statement outside any unit of work (it commits itself): the first row or None."""
        if self.raw is not None and isinstance(statement, Statement):
            return await drivers.raw_one(self.raw, statement, params)
        with drivers.reaching():
            async with self.autocommit_maker() as session:
                return await drivers.session_one(session, statement, params)

    async def all(self, statement: Query, /, **params: Any) -> list[Row]:
        """One statement outside any unit of work (it commits itself): every row."""
        if self.raw is not None and isinstance(statement, Statement):
            return await drivers.raw_all(self.raw, statement, params)
        with drivers.reaching():
            async with self.autocommit_maker() as session:
                return await drivers.session_all(session, statement, params)

    async def execute(self, statement: Query, /, **params: Any) -> int:
        """One statement outside any unit of work (it commits itself): the rows it touched."""
        if self.raw is not None and isinstance(statement, Statement):
            return await drivers.raw_execute(self.raw, statement, params)
        with drivers.reaching():
            async with self.autocommit_maker() as session:
                return await drivers.session_execute(session, statement, params)

    @overload
    def unit(
        self, tenant_id: UUID | None = None, *, single_statement: Literal[False] = False
    ) -> AbstractAsyncContextManager[UnitOfWork]: ...

    @overload
    def unit(
        self, tenant_id: UUID | None = None, *, single_statement: Literal[True]
    ) -> AbstractAsyncContextManager[StatementUnit]: ...

    def unit(
        self, tenant_id: UUID | None = None, *, single_statement: bool = False
    ) -> AbstractAsyncContextManager[Unit]:
        """A unit of work for `tenant_id`: a transaction (`UnitOfWork`), or with
        `single_statement` a `StatementUnit` whose statements each commit on their own."""
        if tenant_id is not None:
            logs.bind(tenant_id=tenant_id)  # the log lines of this task say whose work it is
        return self._statements(tenant_id) if single_statement else self._transaction(tenant_id)

    @asynccontextmanager
    async def _transaction(self, tenant_id: UUID | None) -> AsyncIterator[UnitOfWork]:
        with drivers.reaching():  # PostgreSQL unreachable anywhere in the unit: ServiceUnavailable
            async with self.maker() as session:
                uow = UnitOfWork(session, tenant_id, self)
                try:
                    yield uow
                except BaseException:
                    await _rolled_back(session)
                    raise
                await session.commit()
        await uow._after_commit_shielded()

    @asynccontextmanager
    async def _statements(self, tenant_id: UUID | None) -> AsyncIterator[StatementUnit]:
        with drivers.reaching():  # the pool's connect too: ServiceUnavailable when unreachable
            if self.raw is not None:
                connection = await self.raw.acquire()
                unit = StatementUnit(tenant_id, self, raw=connection)
                try:
                    yield unit  # each statement committed itself; an exception drops the rest
                except BaseException:
                    await drivers.release(self.raw, connection)
                    raise
                # a cancellation while it goes back must not drop what the statements announced
                await unit._finish(asyncio.ensure_future(drivers.release(self.raw, connection)))
            else:
                async with self.autocommit_maker() as session:
                    unit = StatementUnit(tenant_id, self, session=session)
                    try:
                        yield unit
                    except BaseException:
                        await _rolled_back(session)
                        raise
                    await session.commit()
        await unit._after_commit_shielded()
        if unit._cancelled:
            raise asyncio.CancelledError()
