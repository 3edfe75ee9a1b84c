"""Run keys: what `startRun` is given beside the agent and the input, checked before any write.

The seed's rule, one active run per (tenant, agent), becomes one active run per (tenant, agent,
key); a run started with no key has its agent's default key ("" unless the agent declares one),
so an agent that declares nothing keeps the seed's rule exactly. `on_conflict` says what a start
does when its key already has an active run (contract §4.1, `RunConflict`). Tags and the
idempotency key are stored on the run; all three are tenant-scoped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from outlive.db.models import RunConflict
from outlive.errors import BadUserInput

MAX_KEY = 200
MAX_TAGS = 10
MAX_TAG = 64
MAX_IDEMPOTENCY_KEY = 200
_TAG = re.compile(r"[A-Za-z0-9:_.@/-]{1,64}")
# What a key may not hold: controls (CR, LF, NUL…), format characters (bidi overrides and
# isolates, zero-width joiners), lone surrogates, line and paragraph separators. A key is shown
# in the console, in logs and in CSV exports, where those forge lines or reorder what is read.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


DEFAULT_PRIORITY = 3
MAX_DEBOUNCE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Debounce:
    """`startRun(debounce:)`: the run waits `seconds` after the latest start of its key, and at
    most `max_seconds` after the first (None: no bound)."""

    seconds: float
    max_seconds: float | None = None


def check_priority(priority: int | None) -> int:
    if priority is None:
        return DEFAULT_PRIORITY
    if not isinstance(priority, int) or not 1 <= priority <= 5:
        raise BadUserInput("priority is 1 (first) to 5 (last)")
    return priority


def check_debounce(debounce: Debounce | None, *, has_key: bool) -> Debounce | None:
    if debounce is None:
        return None
    if not has_key:
        raise BadUserInput("debounce needs a key: the starts it merges are those of one key")
    if not 0 < debounce.seconds <= MAX_DEBOUNCE_S:
        raise BadUserInput(f"debounce.seconds is above 0 and at most {MAX_DEBOUNCE_S:.0f}")
    if debounce.max_seconds is not None and not (
        debounce.seconds <= debounce.max_seconds <= MAX_DEBOUNCE_S
    ):
        raise BadUserInput(
            f"debounce.maxSeconds is at least seconds and at most {MAX_DEBOUNCE_S:.0f}"
        )
    return debounce


@dataclass(frozen=True, slots=True)
class StartOptions:
    """How a start meets its key's active run, and what it stores beside the input."""

    key: str = ""
    on_conflict: RunConflict = RunConflict.RETURN_EXISTING
    tags: tuple[str, ...] = ()
    idempotency_key: str | None = None
    priority: int = DEFAULT_PRIORITY  # among the tenant's waiting runs: 1 first, 5 last
    debounce: Debounce | None = None  # hold the run back; later starts of its key replace it
    schedule_id: UUID | None = None  # a schedule's occurrence (`services.schedules`)
    scheduled_for: datetime | None = None

    @property
    def in_a_transaction(self) -> bool:
        """The strategy writes more than one statement: the caller's unit must be a transaction."""
        return (
            self.on_conflict
            in (
                RunConflict.ENQUEUE,
                RunConflict.CANCEL_PREVIOUS,
                RunConflict.SIGNAL_EXISTING,
            )
            or self.debounce is not None
        )


DEFAULT_OPTIONS = StartOptions()


def check_key(key: str, *, what: str = "key") -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY:
        raise BadUserInput(f"a {what} is 1 to {MAX_KEY} characters")
    bad = next((c for c in key if unicodedata.category(c) in _INVISIBLE), None)
    if bad is not None:
        raise BadUserInput(
            f"a {what} may not hold control, format or bidi characters (found U+{ord(bad):04X})"
        )
    return key


def check_tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    """The tags in the order given, each once; at most 10, each 1..64 of [A-Za-z0-9:_.@/-]."""
    if not tags:
        return ()
    unique = tuple(dict.fromkeys(tags))
    if len(unique) > MAX_TAGS:
        raise BadUserInput(f"a run has at most {MAX_TAGS} tags")
    for tag in unique:
        if not isinstance(tag, str) or _TAG.fullmatch(tag) is None:
            raise BadUserInput(
                f"tag {str(tag)[:80]!r}: a tag is 1 to {MAX_TAG} characters"
                " of A-Z a-z 0-9 : _ . @ / -"
            )
    return unique


def start_options(
    *,
    key: str | None,
    default_key: str,
    on_conflict: RunConflict | None,
    default_on_conflict: RunConflict | None,
    tags: Sequence[str] | None,
    idempotency_key: str | None,
    priority: int | None = None,
    debounce: Debounce | None = None,
) -> StartOptions:
    """The checked options of one start; `BadUserInput` (nothing written) when one is wrong.
    `key` None: the agent's `default_key`; `on_conflict` None: the agent's, or RETURN_EXISTING
    (ENQUEUE for a debounced start: a burst that comes while the key's last run executes makes
    one run after it, with the burst's last input)."""
    if key is not None:
        check_key(key)
    if idempotency_key is not None:
        check_key(idempotency_key, what="idempotencyKey")
    debounce = check_debounce(debounce, has_key=bool(key))
    fallback = RunConflict.ENQUEUE if debounce is not None else RunConflict.RETURN_EXISTING
    return StartOptions(
        key=default_key if key is None else key,
        on_conflict=on_conflict or (None if debounce else default_on_conflict) or fallback,
        tags=check_tags(tags),
        idempotency_key=idempotency_key,
        priority=check_priority(priority),
        debounce=debounce,
    )
