"""A model call's mark, from before it is made until its step is recorded (`ctx.model_call`).

The mark is a `run_calls` row (`services.runs.calls`), written before the call so that a worker
killed mid-call leaves it: the step's record deletes it, and whatever a run's attempts left is
what the provider billed and the run never kept (`RunUsage.abandonedRequests`). A call the
endpoint refused is not billed (`refused`); one cut in the process is billed, with the tokens its
stream reported if any (`cut`). Marking never fails the call: PostgreSQL unreachable at that
moment only leaves the mark as it was (the call then counts as abandoned).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from outlive.db.tx import Sessions
from outlive.errors import ServiceUnavailable
from outlive.ids import TenantId
from outlive.services.runs import calls

log = logging.getLogger(__name__)


class ModelCall:
    """One model call of a step, marked in `run_calls` (row `seq`)."""

    def __init__(self, sessions: Sessions, tenant_id: TenantId, seq: int) -> None:
        self._sessions, self._tenant_id, self.seq = sessions, tenant_id, seq

    async def refused(self) -> None:
        """The endpoint refused it (an HTTP error status): not billed."""
        await self._marking(calls.refused_call(self._sessions, self._tenant_id, self.seq))

    async def cut(self, reason: str, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        """Cut in the process (a timeout, a stream broken off, a cancel): billed, maybe in
        part; the tokens its stream reported, if it did."""
        await self._marking(
            calls.cut_call(
                self._sessions,
                self._tenant_id,
                self.seq,
                reason=reason,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
            )
        )

    async def _marking(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(write)
        try:
            await asyncio.shield(task)  # a cancel of the call does not cut its mark short
        except asyncio.CancelledError:
            await asyncio.wait({task})
            raise
        except (ServiceUnavailable, OSError) as exc:
            log.warning("model call %s: its mark could not be written (%r)", self.seq, exc)
