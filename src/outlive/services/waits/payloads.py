"""What a signal may be: its name, its payload's size, its idempotency key."""

from __future__ import annotations

from typing import Any

from outlive.errors import BadUserInput
from outlive.services.runs import json_text

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_NAME = 128
MAX_IDEMPOTENCY_KEY = 256


# What a run waits for besides a signal (`Run.waitingFor`): a signal of one of these names could
# otherwise wake it (a paused run resumed by a signal named "pause").
RESERVED = frozenset({"pause", "budget", "version", "children"})


def check_name(name: str) -> str:
    if not name or len(name) > MAX_NAME:
        raise BadUserInput(f"a signal name is 1 to {MAX_NAME} characters")
    if name in RESERVED:
        raise BadUserInput(f"{name!r} is what a held run waits for, not a signal's name")
    return name


def encode_payload(payload: Any) -> str:
    """A signal's payload as JSON text, or `BadUserInput` (over 64 KiB, or not finite)."""
    encoded = json_text(payload)
    if len(encoded.encode()) > MAX_PAYLOAD_BYTES:
        raise BadUserInput(f"a signal's payload is at most {MAX_PAYLOAD_BYTES // 1024} KiB of JSON")
    return encoded
