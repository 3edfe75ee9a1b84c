"""`signalRun`: a signal delivered to a run's mailbox, or bound to one of its waits.

Every accepted signal is kept in the run's mailbox (`run_signals`), and a wait takes the oldest
one of its name (first in, first out), so a signal sent before the wait is never lost. A signal
bound to a wait (`wait_id`, as `Run.waitId` reads while the run waits) is never kept: that wait
takes it at once, or, once that wait is over, it is not accepted (review finding L4: a stale
approval must not answer the next wait of its name).

A wait that named itself (`ctx.wait_for(..., wait_id=)`: a pydantic-ai tool call waiting for its
approval is `call-<tool_call_id>`) takes only a signal bound to it: a plain signal of its name is
refused while it waits (`BadUserInput`, nothing kept), and it never takes one from the mailbox
(round five, F1: a double-clicked approval sat in the mailbox and approved the next refund,
which nobody had seen). What an agent declares of the signals it waits for (their names, their
payloads' schema, whether they must be bound: `agents.registry.Signal`) is checked by the
caller's `check`, after the run's row is locked and before anything is written.

A run's row lock orders the signal against the wait registering, the timer and `cancelRun`:
each race has exactly one outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outlive.db.models import RunStatus
from outlive.db.ports import RunInstances
from outlive.db.tx import Unit
from outlive.errors import BadUserInput, NotFound
from outlive.ids import RunId, TenantId
from outlive.services import relay, runs, sealing
from outlive.services.runs import SETTLED_STATUSES, RunRecord, json_text
from outlive.services.runs import to_record as run_record
from outlive.services.waits import queries
from outlive.services.waits.payloads import (
    MAX_IDEMPOTENCY_KEY,
    RESERVED,
    check_name,
    encode_payload,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

WAIT_ID_PREFIX = "wait-"
MAX_WAIT_ID = 200

# What the caller checks of a signal once it knows the run's agent: (agent, name, payload,
# wait_id) -> None, or `BadUserInput` (nothing is written).
SignalCheck = Callable[[str, str, Any, str | None], None]


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


def wait_id_of(run: RunRecord) -> str | None:
    """While the run is WAITING for a signal: the id of that wait. A wait that named itself has
    its own; otherwise an attempt parks at most once (parking ends it, and waking is a new
    claim), so the attempt that parked names the wait (`wait-<attempt>`)."""
    if run.status != RunStatus.WAITING or run.waiting_for in (None, *RESERVED):
        return None  # a sleep, or a hold (a pause, a budget): no signal answers it
    return run.wait_id or f"{WAIT_ID_PREFIX}{run.attempt}"


def check_wait_id(wait_id: str) -> str:
    """A wait id as a client gives it: 1 to 200 characters (`BadUserInput` otherwise)."""
    if not 0 < len(wait_id) <= MAX_WAIT_ID:
        raise BadUserInput(f"a waitId is a run's `waitId` (1 to {MAX_WAIT_ID} characters)")
    return wait_id


def _attempt_of(wait_id: str) -> int | None:
    """The attempt a `wait-<attempt>` id names; None for a wait that named itself."""
    digits = wait_id.removeprefix(WAIT_ID_PREFIX)
    if not wait_id.startswith(WAIT_ID_PREFIX) or not digits.isdigit() or len(digits) > 9:
        return None
    return int(digits)


async def is_current_wait(uow: Unit, run: RunRecord, name: str, wait_id: str) -> bool:
    """A signal bound to `wait_id`: True when the run waits on that wait now (it takes the
    signal at once), False when that wait is over. `BadUserInput` for an id that names no wait
    of this run (yet), or a wait for another signal name."""
    if wait_id_of(run) == wait_id:
        if run.waiting_for != name:
            raise BadUserInput(f"the wait {wait_id} waits for the signal {run.waiting_for!r}")
        return True
    attempt = _attempt_of(wait_id)
    if attempt is not None:
        if attempt > run.attempt or (attempt == run.attempt and run.status == RunStatus.RUNNING):
            raise BadUserInput(f"this run has no wait {wait_id} (yet)")
        return False  # that wait is over: a signal for it answers no other wait
    found = await uow.one(queries.NAMED_WAIT, run_id=run.id, wait_id=wait_id)
    if found is None:
        raise BadUserInput(f"this run has no wait {wait_id} (yet)")
    if found["name"] != name:
        raise BadUserInput(f"the wait {wait_id} waits for the signal {found['name']!r}")
    return False


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
    check: SignalCheck | None = None,
    cipher: AESGCM | None = None,
) -> SignalResult:
    """Deliver signal `name` to the unit's tenant's run: kept in its mailbox, and taken at once
    when the run is WAITING for that name (woken, and handed to the queue after the commit).
    Not accepted: a settled run, or an `idempotency_key` this run already accepted. Another
    tenant's run (or none): `NotFound`. Bad input, a signal its agent does not take (`check`), an
    unbound signal while the run waits on a wait that takes bound ones only, or a full mailbox
    (`Mailbox`: a signal its run does not wait for now is kept, within bounds): `BadUserInput`,
    nothing written. `cipher`: a tenant that encrypts has the payload stored sealed."""
    mailbox = mailbox or Mailbox()
    encoded = _checked_signal(name, payload, idempotency_key, cipher)
    tenant_id = TenantId(uow.require_tenant())
    row = await uow.one(queries.LOCK_RUN, run_id=run_id, tenant_id=tenant_id)
    if row is None:
        raise NotFound(f"run {run_id} not found")
    run = run_record(row)
    if run.status in SETTLED_STATUSES:
        return SignalResult(run, accepted=False)
    taken_at_once = run.status == RunStatus.WAITING and run.waiting_for == name
    if taken_at_once and wait_id is None:
        _refuse_unbound(run, name)
    if check is not None:
        check(run.agent, name, payload, wait_id)
    if wait_id is not None and not await is_current_wait(uow, run, name, wait_id):
        return SignalResult(run, accepted=False)
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


def _refuse_unbound(run: RunRecord, name: str) -> None:
    """A plain signal while the run waits on a wait that named itself: refused."""
    if run.wait_id is not None:
        raise BadUserInput(
            f"the run waits for {name!r} on the wait {run.wait_id}, which only a signal bound to"
            f" it answers: pass waitId {run.wait_id!r} (nothing was kept)"
        )


def _checked_signal(
    name: str, payload: Any, idempotency_key: str | None, cipher: AESGCM | None
) -> str:
    """The payload as JSON to store (sealed for a tenant that encrypts), once the signal's
    name, key and size (the payload's own, not its seal's) are known to be acceptable."""
    check_name(name)
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
        raise BadUserInput(f"an idempotencyKey is 1 to {MAX_IDEMPOTENCY_KEY} characters")
    encoded = encode_payload(payload)
    return encoded if cipher is None else json_text(sealing.seal_value(cipher, payload))


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
