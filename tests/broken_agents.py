"""An agent package whose import fails, as one that builds its provider at import without its
key would (round five, F11). Loaded with `OUTLIVE_AGENT_MODULES=broken=tests.broken_agents:AGENT`:
the process logs it, marks `broken` unavailable, and serves every other agent."""

from __future__ import annotations

raise RuntimeError("OPENAI_API_KEY is not set")  # at import, before any agent is made
