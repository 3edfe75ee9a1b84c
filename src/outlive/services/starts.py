"""`startRun` with every strategy: the runs slice inserts or meets the key's active run, and
SIGNAL_EXISTING delivers the input to that run as the signal `input` (`services.waits`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from outlive.db.models import RunConflict
from outlive.db.ports import RunInstances
from outlive.db.tx import Unit
from outlive.ids import RunId
from outlive.services import runs, waits
from outlive.services.runs.keys import DEFAULT_OPTIONS, StartOptions

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

INPUT_SIGNAL = "input"  # SIGNAL_EXISTING: the name the input is delivered under


async def start(
    uow: Unit,
    *,
    agent: str,
    params: Mapping[str, Any],
    instances: RunInstances,
    options: StartOptions = DEFAULT_OPTIONS,
    retried_from: RunId | None = None,
    cipher: AESGCM | None = None,
) -> runs.StartedRun:
    """Start a run of `agent` under `options`; see `services.runs.start_run`. With
    SIGNAL_EXISTING, an active run of the key gets the input as the signal `input` (its
    idempotency key, when given, makes a repeated start signal once) and comes back with
    `created: false`. `cipher`: the tenant's data cipher when it encrypts (the input, and the
    signal that carries it, are stored sealed)."""
    for _ in range(20):
        started = await runs.start_run(
            uow,
            agent=agent,
            params=params,
            instances=instances,
            retried_from=retried_from,
            options=options,
            cipher=cipher,
        )
        if (
            options.on_conflict is not RunConflict.SIGNAL_EXISTING
            or started.created
            or started.idempotent
        ):
            return started
        signalled = await waits.signal_run(
            uow,
            started.run.id,
            name=INPUT_SIGNAL,
            payload=dict(params),
            idempotency_key=options.idempotency_key,
            instances=instances,
            cipher=cipher,
        )
        if signalled.accepted or signalled.run.is_active:  # active: a repeated idempotency key
            return runs.StartedRun(run=signalled.run, created=False)
        # It settled before the signal reached it: start again (a new run, or the next head).
    raise RuntimeError(f"could not start or signal a run of {agent!r}")
