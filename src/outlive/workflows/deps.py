"""What an attempt is given: the process's resources (`WorkflowDeps`) and the engine's hooks
(`AttemptControl`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import httpx

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.liveness import Liveness
from outlive.db.ports import REAL_TIME, TimeSource
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.realtime.outputs import OutputStore
from outlive.services import sealing
from outlive.services.ratelimits import RateLimiter
from outlive.services.relay.lead import WakeLead
from outlive.workflows.calls import Limits

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from outlive.workflows.drains import Drains
from outlive.workflows.slots import SlotLender


class AttemptControl(Protocol):
    """What the engine offers an executing attempt."""

    async def heartbeat(self) -> None:
        """Tell the engine this attempt is alive (a missed heartbeat gets it re-delivered)."""

    def is_shutting_down(self) -> bool:
        """True when this worker is stopping gracefully (as opposed to the attempt aborted)."""

    def give_back_attempt(self) -> None:
        """The engine should not count this delivery against the instance's retries."""

    def parked(self) -> None:
        """The attempt parked the run WAITING: once this delivery is over, the engine looks
        whether a wake was handed to it meanwhile (and so was lost)."""


class CancelWatch(Protocol):
    """Pushes cancel requests to the attempts of this process (`outlive.jobs.cancels`)."""

    def watch(self, run_id: RunId, requested: Callable[[], None]) -> Callable[[], None]:
        """Call `requested()` when a cancel of `run_id` is requested; returns the unwatch."""


@dataclass
class WorkflowDeps:
    sessions: Sessions
    agents: AgentRegistry
    http: httpx.AsyncClient
    settings: Settings
    outputs: OutputStore | None = None  # runs' output streams (`ctx.stream`); None: not kept
    limits: Limits | None = None  # named limits shared across workers (`ctx.step(limit=...)`)
    # the tenants' startRun buckets, which child runs take from too; None: not enforced
    starts: RateLimiter | None = None
    cancels: CancelWatch | None = None  # None: a cancel is seen by the heartbeat only
    liveness: Liveness | None = None  # this process's mark of life; None: the lease alone
    # told how long after their hand-back this process's attempts reach the sleeps they resume
    # (the relay's lead, `services.relay.lead`; the default: off)
    wake_lead: WakeLead = field(default_factory=lambda: WakeLead(most_s=0.0, slots=1))
    # lends an attempt's worker slot while it finishes a sleep in-process (the default: never)
    slots: SlotLender = field(default_factory=lambda: SlotLender(most=0))
    # under `ctx.public_http` (each attempt's client checks destinations on top of it)
    public_transport: httpx.AsyncBaseTransport = field(default_factory=httpx.AsyncHTTPTransport)
    # a graceful stop lets drainable steps in flight finish (`workflows.drains`); None: never
    drains: Drains | None = None
    time: TimeSource = REAL_TIME  # what schedules read as now (a test harness's fake clock)

    @property
    def worker_id(self) -> int | None:
        """The liveness key a claim records (None while this process holds no lock)."""
        return None if self.liveness is None else self.liveness.worker_id

    @property
    def kek(self) -> AESGCM | None:
        """The deployment key that wraps tenants' data keys (None: nothing is sealed)."""
        return sealing.kek_of(self.settings)

    @property
    def lease_s(self) -> float:
        """How long an attempt holds its run without a heartbeat."""
        return self.settings.run_heartbeat_s
