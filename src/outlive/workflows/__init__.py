"""The run workflow: claim, execute, finish; and reconcile-on-read."""
