"""Finding the dispatch table named by `OUTLIVE_CRON_TABLE` (default `outlive.cron.table:CRON`)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence

from outlive.cron.deps import CronTask


def load_table(path: str) -> Mapping[str, Sequence[CronTask]]:
    module_name, _, attribute = path.partition(":")
    try:
        table = getattr(importlib.import_module(module_name), attribute or "CRON")
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load the cron table {path!r}: {exc}") from exc
    if not isinstance(table, Mapping):
        raise ValueError(f"the cron table {path!r} is not a mapping of expression to tasks")
    return table
