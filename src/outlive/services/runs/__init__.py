"""Runs: the row is the claim, and the claim's lease lives in the row.

A package of slices: `records` (what it hands out), `start` (insert or hand back the active
run), `reads` (one run, a page, a timeline), `moves` (claim, heartbeat, events, requeue, settle,
cancel: every write carries the one active-status predicate) and `queries` (every statement, as
named constants built at import). The names below are the slice's public API:
`from outlive.services.runs import X` keeps working whichever slice X lives in.
"""

from outlive.services.runs.moves import (
    MAX_ATTEMPTS,
    MAX_LOST_ATTEMPTS,
    Beat,
    append_event,
    cancel_run,
    claim_run,
    dispatch_after_commit,
    heartbeat,
    move_run,
    requeue_lost,
    requeue_run,
    settle_run,
)
from outlive.services.runs.reads import (
    MAX_EVENTS_PAGE,
    MAX_PAGE,
    check_events_page,
    decode_cursor,
    encode_cursor,
    lease_left,
    list_events,
    read_run,
    read_runs,
)
from outlive.services.runs.records import (
    SETTLED_STATUSES,
    EventRecord,
    RunPage,
    RunRecord,
    StartedRun,
    as_json,
    parse_run_id,
    to_record,
)
from outlive.services.runs.start import start_run

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_EVENTS_PAGE",
    "MAX_LOST_ATTEMPTS",
    "MAX_PAGE",
    "SETTLED_STATUSES",
    "Beat",
    "EventRecord",
    "RunPage",
    "RunRecord",
    "StartedRun",
    "append_event",
    "as_json",
    "cancel_run",
    "check_events_page",
    "claim_run",
    "decode_cursor",
    "dispatch_after_commit",
    "encode_cursor",
    "heartbeat",
    "lease_left",
    "list_events",
    "move_run",
    "parse_run_id",
    "read_run",
    "read_runs",
    "requeue_lost",
    "requeue_run",
    "settle_run",
    "start_run",
    "to_record",
]
