"""Metrics, traces and structured logs: a leaf that every layer may use (it imports nothing of
Outlive's but itself); composition roots switch each part on from `Settings`."""
