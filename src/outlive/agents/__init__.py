"""Agents: the code a run executes. See `registry.py` for how to add one."""
