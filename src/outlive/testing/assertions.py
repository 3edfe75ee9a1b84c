"""Assertions on what a run recorded: its steps and its model usage, read through the API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from outlive.testing.harness import Harness


async def assert_steps(
    harness: Harness, run_id: str, expected: Sequence[str], *, once: bool = True
) -> None:
    """The run's steps, by name in completion order, are `expected`; with `once` (the default)
    no (name, occurrence) was recorded twice (a step is recorded once, whatever the attempts)."""
    steps = await harness.steps(run_id)
    names = [s["name"] for s in steps]
    if names != list(expected):
        raise AssertionError(f"run {run_id} recorded the steps {names}, not {list(expected)}")
    keys = [(s["name"], s["occurrence"]) for s in steps]
    if once and len(set(keys)) != len(keys):
        raise AssertionError(f"run {run_id} recorded a step twice: {keys}")


async def assert_usage(
    harness: Harness,
    run_id: str,
    *,
    requests: int | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
) -> None:
    """`Run.usage`'s figures are the ones given (those left None are not checked)."""
    usage = (await harness.run(run_id))["usage"]
    wanted = {"requests": requests, "inputTokens": input_tokens, "outputTokens": output_tokens}
    wrong = {k: (usage[k], v) for k, v in wanted.items() if v is not None and usage[k] != v}
    if wrong:
        raise AssertionError(f"run {run_id}'s usage (found, expected): {wrong}")
