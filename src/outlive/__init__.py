"""Outlive: a request records the work and hands it off."""

import sys

__version__ = "0.1.0"

# httpx imports its command-line client (`httpx._main`: click, rich, pygments) whenever those are
# installed, as they are wherever the docs' or the tests' tools are: 77 ms of every worker's and
# API's start (bench/cold_start.py, `-X importtime`), for a CLI no process of ours runs. Marked
# absent, httpx falls back to its stub `main` (its own `except ImportError`).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
