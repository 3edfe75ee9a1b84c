"""Realtime: tiny nudges over Redis pub/sub, fanned out per tenant by each API process."""
