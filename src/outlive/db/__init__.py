"""Persistence: the engine, the unit of work and the table models."""
