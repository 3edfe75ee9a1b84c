"""Cron tasks: one module per task, each an idempotent `async def task(deps) -> int`."""
