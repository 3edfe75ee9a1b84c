"""One GraphQL operation over HTTP, observed: its route, its metrics, its span, its log line.

`observe_operation` (and `observe_refused`) is the only place that counts
(`outlive_graphql_operations_total`, labelled with the `Route` taken), times
(`outlive_graphql_operation_duration_seconds`) and traces (a server span continuing the caller's
`traceparent`) an operation, and logs its route at debug level. Only an operation that validated
is labelled with its declared name; a refused request is `invalid`.

`Route` is the one list of ways an operation over HTTP is answered; `http.choose_route` picks
one. The other transport is the socket: strawberry executes its subscriptions
(`realtime/sockets.py`), never a query or a mutation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

from outlive.config import Settings
from outlive.telemetry import metrics, tracing

log = logging.getLogger("outlive.graphql")


class Route(StrEnum):
    """How an operation over HTTP was answered (the `route` label and log field)."""

    PLAN = "plan"  # a compiled plan (plans.py)
    EXECUTE_UNPLANNABLE = "execute"  # graphql-core: the document is beyond what plans compile
    EXECUTE_PLANS_OFF = "execute_plans_off"  # graphql-core: OUTLIVE_COMPILED_PLANS is off
    EXECUTE_UNPLANNED = "execute_unplanned"  # graphql-core, after the plan gave up (a bug)
    REFUSED = "refused"  # nothing executed: operation type, validation, variables, limits


@dataclass(slots=True)
class Observed:
    """What the pipeline fills in as the operation goes."""

    route: Route = Route.REFUSED
    ok: bool = False


def labels_for(settings: Settings) -> metrics.OperationLabels:
    """The process's budget of operation labels, and each tenant's share of it."""
    return metrics.OperationLabels(
        settings.metrics_max_operations, settings.metrics_operations_per_tenant
    )


def observe_refused() -> None:
    """A request refused before its operation was found valid (no document, a syntax or
    validation error, an unknown operation, one the method does not allow): counted under
    `invalid`, never under a name the client chose."""
    operation = metrics.INVALID_OPERATION
    metrics.GRAPHQL_OPERATIONS.labels(operation, "unknown", "error", Route.REFUSED.value).inc()


@contextmanager
def observe_operation(operation: str, kind: str, traceparent: str | None) -> Iterator[Observed]:
    """`operation`: the label of an operation that validated (`metrics.OperationLabels`);
    `kind`: its type."""
    observed = Observed()
    began = time.perf_counter()
    with tracing.span(
        f"graphql {kind} {operation}",
        kind=tracing.SpanKind.SERVER,
        parent=traceparent if tracing.is_enabled() else None,
        attributes={"graphql.operation.name": operation, "graphql.operation.type": kind},
    ):
        try:
            yield observed
        finally:
            elapsed = time.perf_counter() - began
            outcome = "ok" if observed.ok else "error"
            route = observed.route.value
            metrics.GRAPHQL_OPERATIONS.labels(operation, kind, outcome, route).inc()
            metrics.GRAPHQL_DURATION.labels(operation, kind).observe(elapsed)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "graphql %s %s: %s via %s",
                    kind,
                    operation,
                    outcome,
                    route,
                    extra={"operation": operation, "route": route, "outcome": outcome},
                )
