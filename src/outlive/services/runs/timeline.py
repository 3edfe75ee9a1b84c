"""The one SQL fragment that appends to a run's timeline (`run_events`).

Every statement that appends events bumps `runs.event_seq` by the number of events in the same
UPDATE (a data-modifying CTE, `moved`), and inserts them from its RETURNING rows: the i-th of n
events gets `event_seq - n + i`, so `seq` is gap-free under concurrent emitters, and "move the
run + its events" is one atomic write. Only `services.runs` writes `runs` and `run_events`
(`.ci/size_check.py` keeps it so): this fragment is the only place that names the table.
"""

from __future__ import annotations

INSERT_EVENTS = "INSERT INTO run_events (run_id, seq, type, data)"

# An event: (its type, its data), SQL over the `source` row; optionally a filter (SQL over the
# row too): an event written only for the rows it matches, its seq kept all the same.
Event = tuple[str, str] | tuple[str, str, str]


def bump(count: int | str = 1) -> str:
    """The SET clause reserving `count` seqs for the events appended from the moved row."""
    return f"event_seq = event_seq + {count}"


def appended(*events: Event, source: str = "moved") -> str:
    """The INSERT appending `events`, in order, for each row of `source` (a CTE that returns
    `id` and the bumped `event_seq`, bumped by `len(events)`)."""
    n = len(events)
    selects = []
    for i, event in enumerate(events, 1):
        type_, data = event[0], event[1]
        where = f" WHERE {event[2]}" if len(event) == 3 else ""
        seq = "event_seq" if i == n else f"event_seq - {n - i}"
        selects.append(f"SELECT id, {seq}, {type_}, {data} FROM {source}{where}")  # noqa: S608
    return f"{INSERT_EVENTS}\n" + "\nUNION ALL\n".join(selects)
