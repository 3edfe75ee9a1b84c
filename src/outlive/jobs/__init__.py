"""Everything saq: the queues, the run-workflow task, the typed jobs queue and its consumer."""
