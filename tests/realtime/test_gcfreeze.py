"""The API process freezes settled objects while it has many sockets, and thaws them to reclaim
reference cycles."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from outlive.realtime.gcfreeze import GcFreezer


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector can free it


@pytest.fixture
def clean_gc() -> Iterator[None]:
    # The freezer collects: without this, an earlier test's unreachable cycle (a client object
    # dropped unclosed) would be finalised here and its ResourceWarning charged to this test.
    # Kept off for the whole test: its own collections finalise whatever the process dropped
    # meanwhile (under xdist, an earlier test's), and this test's subject is the freeze counts.
    hook, sys.unraisablehook = sys.unraisablehook, lambda _: None
    try:
        gc.collect()
        gc.unfreeze()
        yield
    finally:
        gc.unfreeze()
        gc.collect()
        sys.unraisablehook = hook


def test_it_freezes_only_while_there_are_many_subscribers(clean_gc: None) -> None:
    count = 10
    freezer = GcFreezer(lambda: count, min_subscribers=100, thaw_every_s=3600)
    freezer.tick()
    assert (freezer.active, gc.get_freeze_count()) == (False, 0)  # few sockets: nothing to do
    count = 100
    freezer.tick()
    assert freezer.active
    frozen = gc.get_freeze_count()
    assert frozen > 0
    made = [Node() for _ in range(1000)]
    freezer.tick()
    assert gc.get_freeze_count() >= frozen + 1000  # what the last second made is frozen too
    count = 99
    freezer.tick()
    assert (freezer.active, gc.get_freeze_count()) == (False, 0)
    del made


def test_cycles_frozen_with_the_rest_are_reclaimed_at_the_thaw(clean_gc: None) -> None:
    count = 1000
    freezer = GcFreezer(lambda: count, min_subscribers=1, thaw_every_s=3600)
    freezer.tick()
    node = Node()
    alive = weakref.ref(node)
    freezer.tick()  # node is frozen now
    del node
    gc.collect()
    assert alive() is not None  # frozen: the collector does not look at it
    freezer._thaw_every_s = 0
    freezer.tick()
    assert freezer.thaws == 1
    assert alive() is None
    assert gc.get_freeze_count() > 0  # and what is alive is frozen again
