"""The unit of work's promise: after a commit, its nudges go out even if the caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.raw import create_pool, prepare
from outlive.db.tx import Db, PendingNudge, Sessions, StatementUnit, UnitOfWork
from tests.support import TenantHandle


async def test_a_cancelled_caller_still_sends_what_its_commit_promised(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    """A worker stopping mid-step cancels its task right after a commit: the nudge still goes."""
    sink_entered, release = asyncio.Event(), asyncio.Event()
    sent: list[PendingNudge] = []

    async def slow_sink(nudges: Sequence[PendingNudge]) -> None:
        sink_entered.set()
        await release.wait()
        sent.extend(nudges)

    wired = sessions.wired(nudge_sink=slow_sink)

    async def step() -> None:
        async with wired.unit(tenant.id) as uow:
            await uow.execute(text("SELECT 1"))
            uow.nudge("run.updated", tenant.id)

    task = asyncio.create_task(step())
    await sink_entered.wait()
    task.cancel()  # lands while the sink is busy after the commit
    await asyncio.sleep(0)  # let the cancellation reach the task before the sink may finish
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [n.type for n in sent] == ["run.updated"]


async def _on_a_raw_pool(
    sessions: Sessions, settings: Settings, sent: list[PendingNudge]
) -> tuple[Sessions, asyncpg.Pool]:
    """`sessions` on a raw pool of their own (closed by the caller), their nudges into `sent`."""
    assert settings.database_url is not None

    async def sink(nudges: Sequence[PendingNudge]) -> None:
        sent.extend(nudges)

    raw = await create_pool(settings.database_url, max_size=2)
    return Sessions(sessions.maker, sink, autocommit_maker=sessions.autocommit_maker, raw=raw), raw


async def test_a_statement_cancelled_in_flight_finishes_and_still_announces(
    sessions: Sessions, settings: Settings, tenant: TenantHandle
) -> None:
    """On the raw pool a statement commits itself: a cancellation that lands while it runs waits
    for it, the unit's nudge goes out, and only then does the caller see the cancellation."""
    sent: list[PendingNudge] = []
    wired, raw = await _on_a_raw_pool(sessions, settings, sent)
    slow = prepare(text("SELECT pg_sleep(0.5), 'outlive-tx-test' AS marker"))
    finished: list[str] = []

    async def step() -> None:
        async with wired.unit(tenant.id, single_statement=True) as uow:
            row = await uow.one(slow)
            assert row is not None
            finished.append(row["marker"])
            uow.nudge("run.event", tenant.id)

    try:
        task = asyncio.create_task(step())
        watcher = await asyncpg.connect(settings.database_url)
        try:  # until the statement is running on the server
            while not await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%outlive-tx-test%'"
                " AND state = 'active' AND pid <> pg_backend_pid()"
            ):
                pass
        finally:
            await watcher.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await raw.close()
    assert finished == ["outlive-tx-test"]
    assert [n.type for n in sent] == ["run.event"]


_ROWS = prepare(
    text(
        "SELECT n, CAST(:tag AS text) AS tag, CAST('{\"a\": 1}' AS jsonb) AS doc"
        " FROM generate_series(1, 3) AS n ORDER BY n"
    )
)
_TOUCH = prepare(text("UPDATE tenants SET name = name WHERE id = :tenant_id"))


async def test_a_cancellation_as_the_connection_goes_back_still_announces(
    sessions: Sessions, settings: Settings, tenant: TenantHandle
) -> None:
    """Giving the raw connection back suspends the caller (asyncpg shields its release in a task
    of its own): a cancellation that lands there, after the statement committed, still lets the
    unit's nudge go out (a worker stopped mid-step lost a recorded step's nudges so, in CI)."""
    sent: list[PendingNudge] = []
    wired, raw = await _on_a_raw_pool(sessions, settings, sent)

    async def step() -> None:
        async with wired.unit(tenant.id, single_statement=True) as uow:
            await uow.execute(_TOUCH, tenant_id=tenant.id)
            uow.nudge("run.event", tenant.id)
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # delivered at the block's next suspension: the connection's release

    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(step())
    finally:
        await raw.close()
    assert [n.type for n in sent] == ["run.event"]


async def _answers(db: Db, tenant: TenantHandle) -> tuple[object, ...]:
    one = await db.one(_ROWS, tag="x")
    none = await db.one(prepare(text("SELECT 1 AS n WHERE false")))
    rows = await db.all(_ROWS, tag="y")
    touched = await db.execute(_TOUCH, tenant_id=tenant.id)
    return (
        dict(one) if one is not None else None,
        none,
        [dict(r) for r in rows],
        touched,
    )


async def test_every_db_answers_the_same_whichever_driver_runs_it(
    sessions: Sessions, settings: Settings, tenant: TenantHandle
) -> None:
    """Sessions, a single-statement unit and a transaction, on the raw pool and without it: one
    interface, the same rows (by column name, JSON decoded) and the same row counts."""
    assert settings.database_url is not None
    answers = [await _answers(sessions, tenant)]  # no raw pool: SQLAlchemy sessions only
    async with sessions.unit(tenant.id, single_statement=True) as statements:
        answers.append(await _answers(statements, tenant))
    pool = await create_pool(settings.database_url, max_size=2)
    raw = Sessions(sessions.maker, autocommit_maker=sessions.autocommit_maker, raw=pool)
    try:
        answers.append(await _answers(raw, tenant))
        async with raw.unit(tenant.id, single_statement=True) as statements:
            answers.append(await _answers(statements, tenant))
        async with raw.unit(tenant.id) as uow:
            answers.append(await _answers(uow, tenant))
    finally:
        await pool.close()
    expected = (
        {"n": 1, "tag": "x", "doc": {"a": 1}},
        None,
        [{"n": n, "tag": "y", "doc": {"a": 1}} for n in (1, 2, 3)],
        1,
    )
    assert answers == [expected] * 5


async def test_a_single_statement_unit_has_no_session(
    sessions: Sessions, settings: Settings, tenant: TenantHandle
) -> None:
    """Two writes in a unit that commits each statement on its own would not be atomic: such a
    unit is a `StatementUnit`, which has no session to run them in (mypy rejects the attribute)."""
    async with sessions.unit(tenant.id, single_statement=True) as statements:
        assert isinstance(statements, StatementUnit)
        assert not hasattr(statements, "session")
    async with sessions.unit(tenant.id) as uow:
        assert isinstance(uow, UnitOfWork)
        assert await uow.one(prepare(text("SELECT 1 AS n"))) == {"n": 1}
