"""The step body every system of `bench/peers.py` runs: when given a counter file, append
`<workflow> <step>` to it (the bodies that finished, counted outside the process a crash kills).
No import of Outlive here: each peer's worker process imports only this and its own SDK."""

from __future__ import annotations

import os


def body_done(counter_file: str | None, workflow: str, step: int) -> None:
    if not counter_file:
        return
    fd = os.open(counter_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{workflow} {step}\n".encode())
    finally:
        os.close(fd)
