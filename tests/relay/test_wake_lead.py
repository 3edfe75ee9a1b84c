"""The relay's lead for durable sleeps (`outlive.services.relay.lead`): the operator's lead while
wakes are few, shortened so that early wakes never hold more than their share of the worker's
slots however fast they come, and the whole lead again once the burst is over."""

from __future__ import annotations

import pytest

from outlive.services.relay.lead import SLOTS_SHARE, WINDOW, WakeLead


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def burst(lead: WakeLead, clock: Clock, per_second: int) -> None:
    """Two seconds of hand-backs at `per_second`."""
    for _ in range(20):
        clock.now += 0.1
        lead.handed(per_second // 10)


def test_off_when_zero() -> None:
    clock = Clock()
    lead = WakeLead(most_s=0.0, slots=32, clock=clock)
    burst(lead, clock, 10)
    assert lead.seconds == 0.0


def test_few_wakes_get_the_whole_lead() -> None:
    clock = Clock()
    lead = WakeLead(most_s=0.3, slots=32, clock=clock)
    assert lead.seconds == 0.3
    burst(lead, clock, 10)  # 10 wakes a second: 3 slots held at most, under the share
    assert lead.seconds == 0.3


def test_a_burst_gets_a_lead_that_cannot_fill_the_slots() -> None:
    clock = Clock()
    lead = WakeLead(most_s=0.3, slots=32, clock=clock)
    burst(lead, clock, 200)  # no delay seen yet: each early wake holds the whole lead
    assert 200 * lead.seconds == pytest.approx(SLOTS_SHARE * 32, rel=0.01)
    clock.now += 10  # the burst is over: its hand-backs leave the rate
    assert lead.seconds == 0.3


def test_wakes_that_reach_their_sleep_late_hold_less_so_the_lead_may_be_longer() -> None:
    clock = Clock()
    lead = WakeLead(most_s=0.5, slots=32, clock=clock)
    for i in range(WINDOW):
        lead.seen(0.2 if i % 2 else 0.0)  # half the hand-backs take 0.2 s to reach the sleep
    burst(lead, clock, 100)
    bounded = lead.seconds
    held = 100 * (bounded + 0) / 2  # rate x mean(max(0, lead - delay)): the late half hold none
    assert held == pytest.approx(SLOTS_SHARE * 32, rel=0.01)
    assert bounded == pytest.approx(0.16, rel=0.01)  # 0.08 with no delay seen


def test_a_fixed_lead_is_the_whole_lead_whatever_the_rate() -> None:
    clock = Clock()
    lead = WakeLead(most_s=0.3, slots=32, bounded=False, clock=clock)
    burst(lead, clock, 200)
    assert lead.seconds == 0.3
