"""How far ahead of its due time the relay hands back a durable sleep: a lead, bounded by the
worker's slots.

A sleep's run handed back `lead` seconds early is on time when a worker has claimed it and
replayed the agent to its sleep within the lead; the attempt then finishes the sleep in-process,
never before it is due (`services.waits.Resolved.not_before`). Meanwhile it waits: from its
claim to its due time, the lead minus the *hand-back delay* (from the hand-back to the attempt
reaching its sleep). That wait held a worker slot until the slots were lent (below): 200 wakes a
second on 32 slots with a fixed 0.3 s lead held every slot in early wakes while due ones queued,
and the wakes came 2.3 times later than with none. So the lead is `most_s`
(`OUTLIVE_WAKE_LEAD_S`; 0 turns handing back early off), shortened when its early wakes would be
more than the worker lends plus `SLOTS_SHARE` of its slots:

- slots held = the rate of hand-backs this relay made over the last `RATE_WINDOW_S` (`handed`)
  x the mean of max(0, lead - delay) over the last `WINDOW` hand-back delays that the attempts
  reported (`seen`; none yet: each wake counts the whole lead);
- the longest lead up to `most_s` that holds at most that share is bisected.

Only the bound learns. A lead that followed the delays themselves (their 95th percentile) was
tried and measured worse: under a burst the delays rise while the wakes come, so a lead learned
from the last ones is always short (`bench/peers.py --only sleeps`: 144 ms late at p50 against
37 ms with the whole lead, docs/architecture.md).

Early wakes no longer hold a slot each: a worker lends the slot of an attempt waiting out its
sleep (`workflows.slots`), up to `lendable` of them (4 per slot of its concurrency), so the
bound allows that many early wakes on top of the share of the slots; only past it does an early
wake hold a slot again.

`bounded=False` (`OUTLIVE_WAKE_LEAD_BOUNDED`) hands every sleep back the whole `most_s` ahead,
whatever the rate: the fixed lead this replaced. Each worker's relay bounds its lead by its own
slots and its own hand-backs (any worker may claim a run any relay handed back; the delays this
process sees are a sample of the fleet's), so the fleet's bound is the sum of theirs.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from outlive.telemetry import metrics

WINDOW = 256  # hand-back delays kept
SLOTS_SHARE = 0.25  # of the worker's slots that early wakes may hold
RATE_WINDOW_S = 2.0  # the rate of hand-backs is counted over this long


class WakeLead:
    """One worker process's lead (see the module's docstring); `seconds` is read by the relay
    once a pass, `seen` is told by the attempts, `handed` by the relay."""

    def __init__(
        self,
        *,
        most_s: float,
        slots: int,
        lendable: int = 0,
        bounded: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.most_s = most_s
        self.slots = slots
        self.lendable = lendable
        self.bounded = bounded
        self._clock = clock
        self._delays: deque[float] = deque(maxlen=WINDOW)
        self._handed: deque[tuple[float, int]] = deque()

    @property
    def delays(self) -> tuple[float, ...]:
        """The hand-back delays kept, oldest first."""
        return tuple(self._delays)

    def seen(self, delay_s: float) -> None:
        """An attempt reached a sleep `delay_s` after the relay handed its run back."""
        self._delays.append(max(0.0, delay_s))

    def handed(self, count: int) -> None:
        """The relay handed back `count` sleeping runs now (early or when due)."""
        if count:
            self._handed.append((self._clock(), count))

    @property
    def seconds(self) -> float:
        """The lead for the relay's next pass."""
        lead = self.most_s
        if lead > 0 and self.bounded:
            lead = self._slots_bound(lead)
        metrics.WAKE_LEAD.set(lead)
        return lead

    def _slots_bound(self, upper: float) -> float:
        """The longest lead up to `upper` whose early wakes are at most the lendable slots and
        `SLOTS_SHARE` of the others at the current rate of hand-backs (they grow with the lead:
        bisected)."""
        now = self._clock()
        while self._handed and self._handed[0][0] < now - RATE_WINDOW_S:
            self._handed.popleft()
        rate = sum(count for _, count in self._handed) / RATE_WINDOW_S
        allowed = SLOTS_SHARE * self.slots + self.lendable
        delays = self._delays or (0.0,)

        def held(lead: float) -> float:
            return rate * sum(max(0.0, lead - d) for d in delays) / len(delays)

        if held(upper) <= allowed:
            return upper
        low, high = 0.0, upper
        for _ in range(16):
            middle = (low + high) / 2
            low, high = (middle, high) if held(middle) <= allowed else (low, middle)
        return low
