"""Prometheus metrics: every family Outlive exports, declared once, and how they are served.

Names follow Prometheus conventions: the `outlive_` prefix, `_total` on counters, `_seconds` on
durations. Labels are bounded by construction: agents, job types, statuses, outcomes, queue and
pool names, GraphQL operation names (validated and capped, see `operation_label`); never a
tenant, run or job id.

With `PROMETHEUS_MULTIPROC_DIR` set (`outlive api --workers N` sets it for its processes), values
live in files in that directory and `render()` aggregates every process of the server, so any
process's `/metrics` answers for all of them: counters and histograms are summed, gauges are
summed over live processes (`livesum`) or, for fleet-wide readings such as queue depths, the most
recent sample wins (`mostrecent`). Without it, each process serves its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

LONG_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
SHORT_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
WAIT_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

# --- runs -------------------------------------------------------------------------------------

RUNS_STARTED = Counter(
    "outlive_runs_started_total", "Run rows created (startRun, retryRun, replays).", ["agent"]
)
RUNS_SETTLED = Counter(
    "outlive_runs_settled_total", "Runs that reached a settled status.", ["agent", "status"]
)
RUN_ATTEMPT_DURATION = Histogram(
    "outlive_run_attempt_duration_seconds",
    "One delivery of a run's instance: claim, execute, finish.",
    ["agent", "outcome"],
    buckets=LONG_S,
)
RUN_QUEUE_WAIT = Histogram(
    "outlive_run_queue_wait_seconds",
    "From enqueueing a run's instance to its first attempt starting.",
    buckets=WAIT_S,
)
STEPS_RECORDED = Counter(
    "outlive_steps_recorded",
    "Durable steps (`ctx.step`) executed and recorded in the journal.",
    ["agent"],
)
VERSION_HOLDS = Counter(
    "outlive_version_holds",
    "Runs held WAITING for 'version': their code does not reach the steps they recorded.",
    ["agent"],
)
STEP_MEMO_HITS = Counter(
    "outlive_step_memo_hits",
    "Durable steps answered from the journal on a later attempt, without running them again.",
    ["agent"],
)
RUNS_WAITING = Gauge(
    "outlive_runs_waiting",
    "Runs parked WAITING on a durable sleep or a signal, holding no worker (sampled).",
    multiprocess_mode="mostrecent",
)
TIMER_LATENESS = Histogram(
    "outlive_timer_lateness_seconds",
    "From a WAITING run's due time (its sleep, or its signal's timeout) to the relay waking it.",
    buckets=SHORT_S,
)
SCHEDULE_LATENESS = Histogram(
    "outlive_schedule_lateness_seconds",
    "From a schedule's fire time (its occurrence plus its jitter) to the relay firing it.",
    buckets=SHORT_S,
)
SCHEDULE_FIRES = Counter(
    "outlive_schedule_fires_total",
    "Occurrences of schedules by what became of them: started (a run), met (the key's active run"
    " stood for it), skipped (REJECT while the last run was active), missed (past the catch-up"
    " window).",
    ["outcome"],
)
WAKE_LEAD = Gauge(
    "outlive_wake_lead_seconds",
    "How far ahead of its due time this worker's relay hands back a durable sleep (learned).",
    multiprocess_mode="livemax",
)

# --- jobs queue -------------------------------------------------------------------------------

JOBS = Counter("outlive_jobs_total", "Jobs handled, by type and outcome.", ["type", "outcome"])
JOB_DURATION = Histogram(
    "outlive_job_duration_seconds", "One attempt of a job's handler.", ["type"], buckets=SHORT_S
)
JOB_QUEUE_WAIT = Histogram(
    "outlive_job_queue_wait_seconds",
    "From the envelope's enqueued_at to its first attempt starting.",
    ["type"],
    buckets=WAIT_S,
)
JOBS_REJECTED = Counter(
    "outlive_jobs_rejected_total",
    "Poison messages recorded in rejected_jobs (type: a known type, else 'unknown').",
    ["type"],
)
JOBS_REDRIVEN = Counter(
    "outlive_jobs_redriven_total",
    "Rejected jobs re-submitted by `outlive jobs redrive`, by result.",
    ["result"],
)
QUEUE_DEPTH = Gauge(
    "outlive_queue_jobs",
    "saq jobs per queue and state (sampled).",
    ["queue", "state"],
    multiprocess_mode="mostrecent",
)

# --- webhooks ---------------------------------------------------------------------------------

WEBHOOK_REQUESTS = Counter(
    "outlive_webhook_requests_total",
    "Webhook POSTs by outcome (2xx, 3xx, 4xx, 5xx, error).",
    ["outcome"],
)
WEBHOOK_REQUEST_DURATION = Histogram(
    "outlive_webhook_request_duration_seconds",
    "Latency of one webhook POST, by outcome.",
    ["outcome"],
    buckets=SHORT_S,
)

# --- realtime ---------------------------------------------------------------------------------

NUDGES_PUBLISHED = Counter(
    "outlive_nudges_published_total", "Nudges published on Redis, by type.", ["type"]
)
NUDGES_DROPPED = Counter(
    "outlive_nudges_dropped_total", "Nudges not published (Redis pub/sub unreachable)."
)
NUDGE_FANOUT = Histogram(
    "outlive_nudge_fanout_seconds",
    "From a nudge's publish stamp to this process handing it to every subscriber of its tenant.",
    buckets=SHORT_S,
)
SOCKETS = Gauge(
    "outlive_websocket_connections", "Open WebSocket connections.", multiprocess_mode="livesum"
)
SUBSCRIBERS = Gauge(
    "outlive_nudge_subscribers",
    "Nudge subscriptions held by the hub (sampled).",
    multiprocess_mode="livesum",
)

# --- GraphQL ----------------------------------------------------------------------------------

GRAPHQL_OPERATIONS = Counter(
    "outlive_graphql_operations_total",
    "GraphQL operations over HTTP, by operation name, type, outcome and route (plan, execute…).",
    ["operation", "type", "outcome", "route"],
)
GRAPHQL_DURATION = Histogram(
    "outlive_graphql_operation_duration_seconds",
    "GraphQL operations over HTTP: parse, validate and execute.",
    ["operation", "type"],
    buckets=SHORT_S,
)

GRAPHQL_DOCUMENTS = Counter(
    "outlive_graphql_documents_total",
    "Documents the one document cache was asked for (HTTP and the socket's subscriptions): a"
    " `miss` was parsed and validated, a `hit` was found parsed and validated before.",
    ["cache"],
)

GRAPHQL_SHARED_EVENTS = Counter(
    "outlive_graphql_shared_events_total",
    "Subscription events whose result subscribers share (`runOutput` chunks): `executed` ran the"
    " selection, `shared` reused the result another subscriber's identical event got.",
    ["result"],
)

# --- background loops -------------------------------------------------------------------------

DAEMON_CRASHES = Counter(
    "outlive_daemon_crashes_total",
    "A background loop that raised and was restarted with backoff (`outlive.telemetry.daemons`).",
    ["daemon"],
)

EVENT_LOOP_LAG = Histogram(
    "outlive_event_loop_lag_seconds",
    "How late a 100 ms timer of the process's event loop fired: the time every coroutine of"
    " the process waits behind work that holds the loop (encoding, GC, a blocking call), by"
    " process role (api, worker).",
    ["role"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

GC_PAUSE = Histogram(
    "outlive_gc_pause_seconds",
    "Garbage collections and how long each held the process (its event loop included), by"
    " generation (2: a full collection).",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)

# --- database pools ---------------------------------------------------------------------------

DB_POOL_CONNECTIONS = Gauge(
    "outlive_db_pool_connections",
    "Connections of each pool, in use or idle (sampled), by process role (api, worker).",
    ["role", "pool", "state"],
    multiprocess_mode="livesum",
)
DB_POOL_LIMIT = Gauge(
    "outlive_db_pool_max_connections",
    "The most connections each pool may open (size + overflow), by process role.",
    ["role", "pool"],
    multiprocess_mode="livesum",
)

# --- operation names: bounded ----------------------------------------------------------------

MAX_OPERATION_LABELS = 200  # `OUTLIVE_METRICS_MAX_OPERATIONS`'s default
TENANT_OPERATION_LABELS = 20  # `OUTLIVE_METRICS_OPERATIONS_PER_TENANT`'s default
INVALID_OPERATION = (
    "invalid"  # refused before an operation was found valid: no name of the client's
)


class OperationLabels:
    """The `operation` label of an operation that exists in its document and validated (the
    pipeline labels nothing else: a refused request is `invalid`, whatever name it sends): its
    declared name, `anonymous` without one. The first `total` distinct names get their own
    series in each process, later ones are counted as `other`. Each owner (a tenant) brings in
    at most `per_tenant` of them; past that, its new names are `other` and the rest stay for
    other tenants (review finding I1: 205 names from one tenant made another's `other`). A
    name already labelled counts for every tenant that sends it."""

    def __init__(
        self, total: int = MAX_OPERATION_LABELS, per_tenant: int = TENANT_OPERATION_LABELS
    ) -> None:
        self.total, self.per_tenant = total, per_tenant
        self._names: set[str] = set()
        self._brought: dict[object, int] = {}  # owner -> names it brought in
        self._lock = threading.Lock()

    def label(self, name: str | None, owner: object = None) -> str:
        if not name:
            return "anonymous"
        if name in self._names:
            return name
        with self._lock:
            brought = self._brought.get(owner, 0)
            if name not in self._names:
                if len(self._names) >= self.total or brought >= self.per_tenant:
                    return "other"
                self._names.add(name)
                self._brought[owner] = brought + 1
        return name


_default_labels = OperationLabels()


def operation_label(name: str | None, owner: object = None) -> str:
    """`OperationLabels.label` on this process's default budget (tests, tools)."""
    return _default_labels.label(name, owner)


def known_label(value: str, known: Iterable[str], other: str = "unknown") -> str:
    """`value` when it is one of `known` (a bounded set), else `other`."""
    return value if value in known else other


# --- serving ----------------------------------------------------------------------------------


def is_multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def render() -> bytes:
    """The exposition text: this process's registry, or every process's in multiprocess mode."""
    if is_multiprocess():
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def process_exited(pid: int | None = None) -> None:
    """In multiprocess mode, drop a stopped process's live gauges from the sums."""
    if is_multiprocess():
        _multiprocess.mark_process_dead(pid or os.getpid())  # type: ignore[no-untyped-call]


@contextmanager
def multiprocess_directory() -> Iterator[None]:
    """Multiprocess mode for the processes started inside the block (`outlive api --workers N`):
    a fresh `PROMETHEUS_MULTIPROC_DIR` (unless one is set already), removed afterwards. Set
    before the processes start, so that each of them imports prometheus_client in that mode."""
    if os.environ.get(MULTIPROC_ENV):
        yield
        return
    directory = tempfile.mkdtemp(prefix="outlive-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)
