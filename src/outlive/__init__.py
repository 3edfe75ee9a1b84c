"""Outlive: a request records the work and hands it off."""

__version__ = "0.1.0"
