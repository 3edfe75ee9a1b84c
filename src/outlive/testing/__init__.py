"""Testing agents: Outlive in the test's process on real PostgreSQL, with a fake clock
(`Harness`), a recorded-model cassette (`Cassette`), and assertions on steps and usage. See
docs/testing-agents.md."""

from outlive.testing.assertions import assert_steps, assert_usage
from outlive.testing.cassette import Cassette
from outlive.testing.clock import Clock
from outlive.testing.harness import Harness, RunFailed

__all__ = ["Cassette", "Clock", "Harness", "RunFailed", "assert_steps", "assert_usage"]
