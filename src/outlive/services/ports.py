"""The small interfaces services and workflows receive instead of a queue library.

The saq-backed implementations live in `outlive.jobs`; tests and benchmarks use the same ones.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

from outlive.ids import RunId


class InstanceState(enum.StrEnum):
    ACTIVE = "active"  # queued, scheduled for a retry, or executing
    FINISHED = "finished"  # the engine considers it done (complete, failed, aborted)
    MISSING = "missing"  # the engine has no record of it


class RunInstances(Protocol):
    """The workflow engine, as the run services see it: the instance id is the run id."""

    async def start(self, run_id: RunId) -> None:
        """Create the instance; raises `QueueUnavailable` when the engine cannot be reached."""

    async def resume(self, run_id: RunId) -> None:
        """`start` for a run that was woken (its timer fired, or a signal came): its instance
        goes ahead of the instances that have not started yet, so a wake is not late by the
        backlog of new runs."""

    async def states(self, run_ids: Sequence[RunId]) -> list[InstanceState]:
        """The engine's view of each instance, in order."""

    async def redeliver(self, run_ids: Sequence[RunId]) -> int:
        """The process executing these instances is gone (PostgreSQL says so): deliver each one
        again now, whatever the engine believes (its job still looks active on the dead
        worker). How many were handed again; raises `QueueUnavailable` when the engine cannot be
        reached."""
