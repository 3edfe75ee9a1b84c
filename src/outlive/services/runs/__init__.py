"""Runs: the row is the claim, and the claim's lease lives in the row.

A package of slices: `records` (what it hands out), `start` (insert or hand back the active
run), `reads` (one run, a page, a timeline), `steps` (the durable-step journal), `moves` (claim,
heartbeat, events, requeue, settle, cancel: every write carries the one active-status
predicate) and `queries` (every statement, as
named constants built at import). The names below are the slice's public API:
`from outlive.services.runs import X` keeps working whichever slice X lives in.
"""

from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.moves import (
    MAX_ATTEMPTS,
    MAX_LOST_ATTEMPTS,
    Beat,
    append_event,
    cancel_run,
    claim_run,
    heartbeat,
    move_run,
    requeue_lost,
    requeue_run,
    settle_run,
)
from outlive.services.runs.reads import (
    MAX_EVENTS_PAGE,
    MAX_PAGE,
    RunOrder,
    barren_losses,
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
    StepRecord,
    as_json,
    json_text,
    parse_run_id,
    to_record,
)
from outlive.services.runs.start import start_run
from outlive.services.runs.steps import (
    MAX_STEP_BYTES,
    MAX_STEP_NAME,
    MAX_STEPS_PAGE,
    Journal,
    check_steps_page,
    copy_steps,
    list_steps_of_runs,
    load_journal,
    record_step,
    step_results,
)
from outlive.services.runs.wakes import (
    handed,
    handoff_failed_runs,
    note_signal,
    park_run,
    wake_by_signal,
    wake_due,
)

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_EVENTS_PAGE",
    "MAX_LOST_ATTEMPTS",
    "MAX_PAGE",
    "MAX_STEPS_PAGE",
    "MAX_STEP_BYTES",
    "MAX_STEP_NAME",
    "SETTLED_STATUSES",
    "Beat",
    "EventRecord",
    "Journal",
    "RunOrder",
    "RunPage",
    "RunRecord",
    "StartedRun",
    "StepRecord",
    "append_event",
    "as_json",
    "barren_losses",
    "cancel_run",
    "check_events_page",
    "check_steps_page",
    "claim_run",
    "copy_steps",
    "decode_cursor",
    "dispatch_after_commit",
    "encode_cursor",
    "handed",
    "handoff_failed_runs",
    "heartbeat",
    "json_text",
    "lease_left",
    "list_events",
    "list_steps_of_runs",
    "load_journal",
    "move_run",
    "note_signal",
    "park_run",
    "parse_run_id",
    "read_run",
    "read_runs",
    "record_step",
    "requeue_lost",
    "requeue_run",
    "settle_run",
    "start_run",
    "step_results",
    "to_record",
    "wake_by_signal",
    "wake_due",
]
