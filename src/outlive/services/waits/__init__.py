"""Durable sleeps, waits for a signal, and the signals mailbox (contract §4.1, §7).

A sleep past the in-process threshold, or a wait for a signal that is not in the mailbox yet,
parks the run: RUNNING → WAITING in one conditional update fenced on the attempt, with a
`waiting {for, until}` event, and the attempt ends (its worker slot is free; `RunParked`). The
run keeps its (tenant, agent) slot but no place under its tenant's cap. It is woken by:

- its timer (`runs.wake_at`), by the relay in any worker (`services.relay`): `resumed {by:
  "timer"}` after a sleep, `resumed {by: "timeout"}` after a wait for a signal;
- a signal of the name it waits for (`signal_run`): `signal {name}`, then `resumed {by:
  "signal"}`;
- or settled by `cancelRun`, at once.

Each sleep and wait has a durable record in `run_waits`, keyed like a step by (kind, name,
occurrence): the occurrence counts that kind's calls (a sleep; a wait for that name) in program
order within an attempt. Woken, the run is claimed again (a new attempt, not a retry: `resumes`)
and the agent runs from the top: a sleep or wait whose record is resolved returns at once (the
wait with its signal's payload, or its timeout). Code outside durable steps runs again.

A durable sleep's run is handed back ahead of its due time, by the relay's lead
(`services.relay.lead`: `OUTLIVE_WAKE_LEAD_S`, shorter under bursts; the attempt it is handed to
reports how long the hand-back took, `Resolved.handed_s`, for the lead's bound), so that a
worker has claimed it and replayed to the sleep by then: its record is resolved, but `until` is
still ahead, and the attempt finishes the sleep in-process (`Resolved.not_before`, from
PostgreSQL's clock: never before `until`; a cancel ends it at once). Its worker slot is free for
the rest of the sleep. A signal's timeout is never handed back early.

The mailbox (`run_signals`): every accepted signal is kept, and a wait takes the oldest one of
its name (first in, first out), so a signal sent before the wait is never lost. A signal bound
to a wait (`wait_id`, as `Run.waitId` reads while the run waits) is never kept: that wait takes
it at once, or, once that wait is over, it is not accepted (review finding L4: a stale approval
must not answer the next wait of its name). A run's row lock
orders the signal against the wait registering, the timer and `cancelRun`: each race has
exactly one outcome.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outlive.db.models import RunStatus
from outlive.db.ports import RunInstances
from outlive.db.tx import Unit
from outlive.errors import BadUserInput, NotFound, RunCancelled, RunSuperseded
from outlive.ids import RunId, TenantId
from outlive.services import relay, runs
from outlive.services.runs import (
    SETTLED_STATUSES,
    RunRecord,
    as_json,
    json_text,
)
from outlive.services.runs import to_record as run_record
from outlive.services.waits import queries

log = logging.getLogger(__name__)

SLEEP = "sleep"
SIGNAL = "signal"
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_NAME = 128
MAX_IDEMPOTENCY_KEY = 256


@dataclass(frozen=True, slots=True)
class Resolved:
    """A sleep or wait that is over: `by` "timer", "signal" or "timeout"; a signal's payload.
    `not_before`: a sleep handed back ahead of its due time ends at this `time.monotonic()`
    (0: now). `handed_s`: a sleep the relay handed back to this attempt (the one after the
    attempt that parked on it): how long ago, by PostgreSQL's clock (the relay's lead bounds
    the slots early wakes hold with it, `services.relay.lead`); None otherwise."""

    by: str
    payload: Any = None
    not_before: float = 0.0
    handed_s: float | None = None


@dataclass(frozen=True, slots=True)
class Parked:
    """The run is WAITING now; the attempt must end."""

    run: RunRecord


# What a run waits for besides a signal (`Run.waitingFor`): a signal of one of these names could
# otherwise wake it (a paused run resumed by a signal named "pause").
RESERVED = frozenset({"pause", "budget", "version", "children"})


def check_name(name: str) -> str:
    if not name or len(name) > MAX_NAME:
        raise BadUserInput(f"a signal name is 1 to {MAX_NAME} characters")
    if name in RESERVED:
        raise BadUserInput(f"{name!r} is what a held run waits for, not a signal's name")
    return name


async def wait(
    uow: Unit,
    *,
    run_id: RunId,
    attempt: int,
    kind: str,
    name: str,
    occurrence: int,
    seconds: float | None = None,
    until: datetime | None = None,
) -> Resolved | Parked:
    """Get past the `occurrence`-th sleep (`kind` SLEEP, `name` "") or wait for signal `name`
    (`kind` SIGNAL) of this attempt: already resolved (a resumed attempt), satisfied now (a
    signal in the mailbox), or parked. `seconds` / `until`: its timer (neither: a wait with no
    timeout). Raises `RunSuperseded` when `attempt` no longer executes the run, `RunCancelled`
    when a cancel was asked for."""
    lock = await uow.one(queries.LOCK_ATTEMPT, run_id=run_id, attempt=attempt)
    if lock is None:
        raise RunSuperseded(f"attempt {attempt} of run {run_id} no longer holds it")
    if lock["cancel_requested_at"] is not None:
        raise RunCancelled()
    key = {"run_id": run_id, "kind": kind, "name": name, "occurrence": occurrence}
    record = await uow.one(queries.GET_WAIT, **key)
    if record is not None and record["resolved_at"] is not None:
        return Resolved(
            record["resolved_by"],
            record["payload"],
            _not_before(kind, record),
            _handed(kind, record, attempt),
        )
    if kind == SIGNAL:
        taken = await uow.one(queries.TAKE_SIGNAL, run_id=run_id, name=name)
        if taken is not None:
            await _record(uow, key, attempt, seconds, until, by=SIGNAL, payload=taken["payload"])
            return Resolved(SIGNAL, taken["payload"])
    if record is None:
        record = await _record(uow, key, attempt, seconds, until)
    if kind == SLEEP and record["left_s"] is not None and record["left_s"] <= 0:
        await _record(uow, key, attempt, seconds, until, by="timer")
        return Resolved("timer")
    run = await runs.park_run(
        uow,
        run_id,
        attempt=attempt,
        waiting_for=name if kind == SIGNAL else None,
        until=record["until"],
    )
    if run is None:  # the lock above makes this unreachable; fenced all the same
        raise RunSuperseded(f"attempt {attempt} of run {run_id} no longer holds it")
    return Parked(run)


def _not_before(kind: str, record: Any) -> float:
    """When a resolved sleep whose `until` is still ahead (handed back early) may end: the time
    left by PostgreSQL's clock, from now on this process's monotonic clock (so never early)."""
    due_in = float(record["due_in_s"] or 0.0)
    return time.monotonic() + due_in if kind == SLEEP and due_in > 0 else 0.0


def _handed(kind: str, record: Any, attempt: int) -> float | None:
    """How long ago the relay handed this sleep's run back, when this attempt is the one it was
    handed to (the next after the attempt that parked on it); None otherwise (a replay of an
    older sleep, a sleep resolved in-process, a take-over after a lost worker)."""
    handed = kind == SLEEP and record["resolved_by"] == "timer" and record["attempt"] == attempt - 1
    return float(record["handed_s"]) if handed else None


async def _record(
    uow: Unit,
    key: dict[str, Any],
    attempt: int,
    seconds: float | None,
    until: datetime | None,
    *,
    by: str | None = None,
    payload: Any = None,
) -> Any:
    return await uow.one(
        queries.RECORD_WAIT,
        **key,
        attempt=attempt,
        seconds=seconds,
        until=until,
        resolved_by=by,
        payload=as_json(payload) if by is not None else None,
    )


def encode_payload(payload: Any) -> str:
    """A signal's payload as JSON text, or `BadUserInput` (over 64 KiB, or not finite)."""
    encoded = json_text(payload)
    if len(encoded.encode()) > MAX_PAYLOAD_BYTES:
        raise BadUserInput(f"a signal's payload is at most {MAX_PAYLOAD_BYTES // 1024} KiB of JSON")
    return encoded


@dataclass(frozen=True, slots=True)
class Mailbox:
    """The bounds of one run's kept signals (sent, not taken by a wait yet): a count and the
    bytes of their payloads (`OUTLIVE_SIGNAL_MAILBOX_MAX`, `OUTLIVE_SIGNAL_MAILBOX_BYTES`).
    The run's row lock, taken before, makes the count exact."""

    max_count: int = 100
    max_bytes: int = 1024 * 1024

    async def check(self, uow: Unit, run_id: RunId, adding: int) -> None:
        row = await uow.one(queries.MAILBOX, run_id=run_id)
        count, size = (row["n"], row["bytes"]) if row is not None else (0, 0)
        if count + 1 > self.max_count or size + adding > self.max_bytes:
            raise BadUserInput(
                f"this run's mailbox is full: at most {self.max_count} signals and"
                f" {self.max_bytes // 1024} KiB are kept until the run waits for them"
            )


WAIT_ID_PREFIX = "wait-"


def wait_id_of(run: RunRecord) -> str | None:
    """While the run is WAITING for a signal: the id of that wait. An attempt parks at most once
    (parking ends it, and waking is a new claim), so the attempt that parked names the wait."""
    if run.status != RunStatus.WAITING or run.waiting_for in (None, *RESERVED):
        return None
    return f"{WAIT_ID_PREFIX}{run.attempt}"


def parse_wait_id(wait_id: str) -> int:
    """The attempt a wait id names, or `BadUserInput` for a string no run ever read."""
    digits = wait_id.removeprefix(WAIT_ID_PREFIX)
    if not wait_id.startswith(WAIT_ID_PREFIX) or not digits.isdigit() or len(digits) > 9:
        raise BadUserInput("a waitId is a run's `waitId`, as read while it waits")
    return int(digits)


def is_current_wait(run: RunRecord, name: str, wait_id: str) -> bool:
    """A signal bound to `wait_id`: True when the run waits on that wait now (it takes the
    signal at once), False when that wait is over. `BadUserInput` for an id that names no wait
    of this run, or a wait for another signal name."""
    attempt = parse_wait_id(wait_id)
    if attempt > run.attempt or (attempt == run.attempt and run.status == RunStatus.RUNNING):
        raise BadUserInput(f"this run has no wait {wait_id} (yet)")
    if wait_id_of(run) != wait_id:
        return False  # that wait is over: a signal for it answers no other wait
    if run.waiting_for != name:
        raise BadUserInput(f"the wait {wait_id} waits for the signal {run.waiting_for!r}")
    return True


@dataclass(frozen=True, slots=True)
class SignalResult:
    run: RunRecord
    accepted: bool


async def signal_run(
    uow: Unit,
    run_id: RunId,
    *,
    name: str,
    payload: Any,
    idempotency_key: str | None,
    instances: RunInstances,
    mailbox: Mailbox | None = None,
    sender: str | None = None,
    wait_id: str | None = None,
) -> SignalResult:
    """Deliver signal `name` to the unit's tenant's run: kept in its mailbox, and taken at once
    when the run is WAITING for that name (woken, and handed to the queue after the commit).
    Not accepted: a settled run, or an `idempotency_key` this run already accepted. Another
    tenant's run (or none): `NotFound`. Bad input, or a full mailbox (`Mailbox`: a signal its
    run does not wait for now is kept, within bounds): `BadUserInput`, nothing written."""
    mailbox = mailbox or Mailbox()
    encoded = _checked_signal(name, payload, idempotency_key)
    tenant_id = TenantId(uow.require_tenant())
    row = await uow.one(queries.LOCK_RUN, run_id=run_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound(f"run {run_id} not found")
    run = run_record(row)
    if run.status in SETTLED_STATUSES:
        return SignalResult(run, accepted=False)
    if wait_id is not None and not is_current_wait(run, name, wait_id):
        return SignalResult(run, accepted=False)
    taken_at_once = run.status == RunStatus.WAITING and run.waiting_for == name
    if not taken_at_once:
        await mailbox.check(uow, run_id, len(encoded.encode()))
    inserted = await uow.one(
        queries.INSERT_SIGNAL,
        run_id=run_id,
        tenant_id=tenant_id,
        name=name,
        payload=encoded,
        idempotency_key=idempotency_key,
    )
    if inserted is None:
        return SignalResult(run, accepted=False)
    woken = None
    if taken_at_once:
        woken = await runs.wake_by_signal(
            uow, run, name, seq=inserted["seq"], payload=encoded, sender=sender
        )
    if woken is not None:
        _hand_after_commit(uow, woken, instances)
    else:
        woken = await runs.note_signal(uow, run_id, name, payload=encoded, sender=sender)
    uow.nudge("run.event", run_id, tenant_id=tenant_id)
    return SignalResult(woken, accepted=True)


def _checked_signal(name: str, payload: Any, idempotency_key: str | None) -> str:
    """The payload as JSON, once the signal's name, key and size are known to be acceptable."""
    check_name(name)
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
        raise BadUserInput(f"an idempotencyKey is 1 to {MAX_IDEMPOTENCY_KEY} characters")
    return encode_payload(payload)


def _hand_after_commit(uow: Unit, woken: RunRecord, instances: RunInstances) -> None:
    """After the commit, the woken run goes to the queue (or waits for a slot, if not admitted)."""

    async def hand() -> None:
        admitted = woken.dispatched_at is not None
        await relay.hand_woken(
            uow.sessions,
            instances,
            [{"id": woken.id, "tenant_id": woken.tenant_id, "admitted": admitted}],
        )

    uow.after_commit(hand)


__all__ = [
    "MAX_PAYLOAD_BYTES",
    "SIGNAL",
    "SLEEP",
    "Parked",
    "Resolved",
    "SignalResult",
    "check_name",
    "is_current_wait",
    "parse_wait_id",
    "signal_run",
    "wait",
    "wait_id_of",
]
