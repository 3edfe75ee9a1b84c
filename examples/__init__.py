"""Agents a user can copy. Each is an importable module with an `AGENT`."""
