"""Building the web app for `outlive dev` (a placeholder until the web app lands)."""

from __future__ import annotations


def ensure_built() -> None:
    """Build `web/` into `outlive/web/dist` when the build is missing or stale."""
