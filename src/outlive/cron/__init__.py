"""Cron triggers: a dispatch table keyed on the exact cron expression."""
