"""Child runs from inside an agent: `ctx.call`, `ctx.spawn`, `ctx.map`.

A child's identity is (parent, step): `name#occurrence`, the occurrence counted per name at the
call in program order (like a durable step's), and `name#occurrence[i]` for the i-th input of a
`map`. Starting a child that its step already has returns that child (`services.runs.children`),
so an attempt that runs again from the top after a retry, a resume or a lost worker meets the
same children, settled or not, and never starts one twice.

Waiting reads the children and the parent's count of settled children in one snapshot; when
something is still running it parks the run WAITING for `children` (no worker, no slot of its
tenant's cap) at that count, and the attempt ends (`RunParked`). A child's settle wakes it, and
the attempt that resumes it reads again. A park refused because a child settled meanwhile reads
again at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from outlive.db.tx import Sessions
from outlive.errors import ChildFailed, RunCancelled, RunParked, RunSuperseded
from outlive.ids import RunId
from outlive.services.ratelimits import start_run_bucket
from outlive.services.runs import RunRecord
from outlive.services.runs import children as children_service
from outlive.services.runs.children import ChildSpec, ChildState
from outlive.services.sealing import Sealer
from outlive.workflows.deps import WorkflowDeps

SETTLED = ("SUCCEEDED", "FAILED", "CANCELLED")
CHILD_SPAWN_BATCH = 100  # children started in one statement
MAX_START_WAIT_S = 5.0  # one wait for the startRun bucket; then it is asked again


def _outcome(child: ChildState, sealer: Sealer) -> Any:
    if child.status == "SUCCEEDED":
        return sealer.open(child.output)  # a child of a tenant that encrypts: sealed
    return ChildFailed(child.id, child.status, child.error)


@dataclass(frozen=True)
class ChildHandle:
    """A child started by `ctx.spawn`: `await handle.result()` parks until it settles."""

    id: RunId
    step: str
    _family: Family

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (durable)
        """The child's output; `ChildFailed` when it failed or was cancelled; `TimeoutError`
        when it has not settled `timeout` seconds after it started (PostgreSQL's clock)."""
        (outcome,) = await self._family.gather([self.step], limit=None, timeout=timeout)
        if isinstance(outcome, ChildFailed):
            raise outcome
        return outcome


class Family:
    """The children of one attempt's run."""

    def __init__(
        self,
        deps: WorkflowDeps,
        run: RunRecord,
        attempt: int,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        sealer: Sealer | None = None,
    ) -> None:
        self._deps = deps
        self._sealer = sealer or Sealer()  # the parent's: its children are of its tenant
        self._pause = pause  # a wait a cancel interrupts (the attempt's)
        self._sessions: Sessions = deps.sessions
        self._run = run
        self._attempt = attempt
        self._occurrences: Counter[str] = Counter()

    def next_step(self, name: str) -> str:
        if not name or len(name) > 100 or any(c in name for c in "#[]"):
            raise ValueError("a child's name is 1 to 100 characters, without '#', '[' or ']'")
        self._occurrences[name] += 1
        return f"{name}#{self._occurrences[name]}"

    def spec(
        self,
        step: str,
        agent: str,
        input: Mapping[str, Any] | None,
        *,
        key: str | None = None,
        abandon: bool = False,
    ) -> ChildSpec:
        """The child's row as it will be written; its input validated like `startRun`'s (a
        bad one fails the parent: it is the agent's bug)."""
        found = self._deps.agents.get(agent)
        if found is None:
            raise ValueError(f"agent {agent!r} is not installed")
        return ChildSpec(
            step,
            agent,
            self._sealer.seal(found.validate(input, settings=self._deps.settings)),
            key=key,
            abandon=abandon,
        )

    async def start(self, specs: Sequence[ChildSpec]) -> None:
        for at in range(0, len(specs), CHILD_SPAWN_BATCH):
            await self._admit(len(specs[at : at + CHILD_SPAWN_BATCH]))
            async with self._sessions.unit(self._run.tenant_id) as uow:
                held, cancelling = await children_service.spawn(
                    uow,
                    parent=self._run,
                    attempt=self._attempt,
                    children=specs[at : at + CHILD_SPAWN_BATCH],
                )
            self._check(held, cancelling)

    async def _admit(self, count: int) -> None:
        """Children are runs the tenant starts: each takes a token of its startRun bucket
        (`OUTLIVE_RATE_START_RUN`), as `startRun` does. Past it the parent waits here, a cancel
        interrupting, rather than fail: one `startRun` of a parent cannot make 1,000 runs in a
        moment. A child its step already has costs a token again on a rerun (rare: a lost
        attempt), which only slows that parent."""
        limiter, rate = self._deps.starts, self._deps.settings.rate_start_run
        if limiter is None or rate is None:
            return
        bucket = start_run_bucket(self._run.tenant_id, rate)
        while count > 0:
            piece = min(count, rate.count)  # a bucket never holds more than its count
            wait = await limiter.wait_to_take(bucket, piece)
            if wait > 0:
                await self._pause(min(wait, MAX_START_WAIT_S))
            else:
                count -= piece

    async def handle(self, spec: ChildSpec) -> ChildHandle:
        await self.start([spec])
        async with self._sessions.unit(self._run.tenant_id, single_statement=True) as uow:
            state = await children_service.read_children(
                uow, self._run.id, [spec.step], attempt=self._attempt
            )
        return ChildHandle(state.by_step[spec.step].id, spec.step, self)

    async def gather(
        self,
        steps: Sequence[str],
        *,
        limit: int | None,
        timeout: float | None = None,  # noqa: ASYNC109 (durable)
        pending: Sequence[ChildSpec] = (),
        fail_fast: bool = True,
    ) -> list[Any]:
        """The outcomes of the children of `steps`, in order, once all settled. `pending`: specs
        of children not started yet, started in order while fewer than `limit` are live. A
        failed child raises `ChildFailed` at once when `fail_fast`."""
        waiting = list(pending)
        while True:
            async with self._sessions.unit(self._run.tenant_id, single_statement=True) as uow:
                state = await children_service.read_children(
                    uow, self._run.id, steps, attempt=self._attempt
                )
            self._check(state.held, state.cancelling)
            known = state.by_step
            waiting = [s for s in waiting if s.step not in known]
            live = sum(1 for c in known.values() if c.status not in SETTLED)
            room = len(waiting) if limit is None else max(0, limit - live)
            if waiting and room:
                await self.start(waiting[:room])
                continue
            if fail_fast:
                for step in steps:
                    child = known.get(step)
                    if child is not None and child.status in ("FAILED", "CANCELLED"):
                        raise ChildFailed(child.id, child.status, child.error)
            if all(s in known and known[s].status in SETTLED for s in steps):
                return [_outcome(known[s], self._sealer) for s in steps]
            # Woken when a slot opens for the next child, or when the last one settles.
            unsettled = sum(1 for s in steps if s not in known or known[s].status not in SETTLED)
            target = state.seen + (1 if waiting or timeout is not None else unsettled)
            await self._park(target, steps, known, timeout)

    async def _park(
        self,
        target: int,
        steps: Sequence[str],
        known: Mapping[str, ChildState],
        timeout: float | None,  # noqa: ASYNC109 (durable)
    ) -> None:
        until = None
        if timeout is not None:
            oldest = max((known[s].age_s for s in steps if s in known), default=0.0)
            if oldest >= timeout:
                raise TimeoutError(f"child {steps[0]} did not settle within {timeout:g}s")
            until = _in(timeout - oldest)
        async with self._sessions.unit(self._run.tenant_id) as uow:
            parked = await children_service.park_for_children(
                uow, self._run, attempt=self._attempt, target=target, until=until
            )
        if parked is not None:
            raise RunParked(f"run {self._run.id} waits for its children")

    def _check(self, held: bool, cancelling: bool) -> None:
        if cancelling:
            raise RunCancelled()
        if not held:
            raise RunSuperseded(f"attempt {self._attempt} of run {self._run.id} no longer holds it")


def _in(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)
