"""Code versions at run time: does the code reach the steps a run recorded? (contract §7
"Versions"). Shared by a worker's attempt (`workflows.steps`) and `outlive replay`
(`workflows.replay`), so both decide the same way.

The journal is keyed by step name and occurrence, so most edits survive: a step added after
the last one a run recorded, a loop that runs once more, a helper renamed. What does not:
- **a step the journal does not have, where recorded steps remain** (a step added, renamed or
  moved ahead of steps the run recorded): the new code asks for something the old one never did
  at that point;
- **a recorded step the code no longer reaches** (a step deleted or renamed): the run ends with
  recorded steps it never asked for;
- **a recorded result that no longer validates** against the step function's return annotation
  (its return type changed): `output invalid`.

At run time these hold the run WAITING for 'version' (`services.runs.holds.hold_version`, a
`version` event saying where and why) instead of failing it or running on, but only when some
recorded step was recorded by another code version (a deploy): code that is its own journal's
author, and asks for other steps than it recorded, keeps its behaviour (it runs them).

`ctx.patched(name)` marks a change: its answer is recorded in the journal as the step
`patched:<name>` (true or false), so it never changes for a run. Without a recorded answer it is
false when the run already went past that point on older code (recorded steps this attempt has
not reached yet remain, or waits it has not reached), and true otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PATCH_PREFIX = "patched:"  # the journal's name of a `ctx.patched` answer
MAX_PATCH_NAME = 190


class VersionDiverged(Exception):
    """The code does not reach the steps the run recorded: `kind` is "diverged" or
    "output invalid", at step (`step`, `occurrence`), for reason `why`."""

    def __init__(self, kind: str, step: str, occurrence: int, why: str) -> None:
        super().__init__(f"{kind} at {step} #{occurrence}: {why}")
        self.kind = kind
        self.step = step
        self.occurrence = occurrence
        self.why = why

    @property
    def verdict(self) -> str:
        """One line, as `outlive replay` prints it."""
        if self.kind == "output invalid":
            return f"output invalid: {self.step} #{self.occurrence}: {self.why}"
        return f"diverged at {self.step} #{self.occurrence}: {self.why}"

    def event(self, code_version: str | None) -> dict[str, object]:
        """The `version` event's data."""
        return {
            "for": "version",
            "kind": self.kind,
            "step": self.step,
            "occurrence": self.occurrence,
            "why": self.why,
            "codeVersion": code_version,
            "verdict": self.verdict,
        }


def patch_step(name: str) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_PATCH_NAME:
        raise ValueError(f"a patch's name is 1 to {MAX_PATCH_NAME} characters")
    return PATCH_PREFIX + name


@dataclass
class Cursor:
    """Which recorded steps an attempt has asked for so far (taken at the call, as occurrences
    are). `pending` keeps the journal's completion order; `patched:` answers are not steps."""

    pending: dict[tuple[str, int], None]

    @classmethod
    def of(cls, keys: Iterable[tuple[str, int]]) -> Cursor:
        return cls({k: None for k in keys if not k[0].startswith(PATCH_PREFIX)})

    def take(self, key: tuple[str, int]) -> None:
        self.pending.pop(key, None)

    def next_recorded(self) -> tuple[str, int] | None:
        return next(iter(self.pending), None)

    def missed(self, name: str, occurrence: int) -> VersionDiverged | None:
        """A step the journal does not have: a divergence when recorded steps remain."""
        ahead = self.next_recorded()
        if ahead is None:
            return None
        return VersionDiverged(
            "diverged",
            name,
            occurrence,
            f"not in the journal, where recorded steps remain (next recorded: {ahead[0]}"
            f" #{ahead[1]})",
        )

    def ended(self) -> VersionDiverged | None:
        """The code returned: a divergence when it never asked for a recorded step."""
        ahead = self.next_recorded()
        if ahead is None:
            return None
        more = len(self.pending) - 1
        also = f" ({more} more recorded step{'s' if more != 1 else ''} after it)" if more else ""
        return VersionDiverged(
            "diverged", ahead[0], ahead[1], f"recorded, but the code no longer reaches it{also}"
        )


def invalid(name: str, occurrence: int, exc: Exception) -> VersionDiverged:
    """A recorded result the step's return annotation no longer accepts."""
    text = str(exc).splitlines()
    detail = "; ".join(line.strip() for line in text[:3]) if text else type(exc).__name__
    return VersionDiverged(
        "output invalid",
        name,
        occurrence,
        f"its recorded result no longer validates as the step's return type ({detail})",
    )
