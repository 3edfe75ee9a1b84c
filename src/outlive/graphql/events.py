"""A subscription event executed once for all its subscribers: `SharedEvents`.

graphql-core executes a subscription's selection once per event and subscriber. For `runOutput`
that is once per chunk and reader: 500 readers of one run executed every chunk 500 times, the
API's largest cost once documents were cached (bench/streams.py). Its events are `OutputChunk`s,
plain values whose fields read nothing else (no context, no loader, no database), so the result
depends only on the operation (one object per document: the document cache), its variables and
the chunk. `SharedEvents` keeps the last `SHARED_EVENTS` such results and hands every reader of
the same chunk with the same operation and variables the same `ExecutionResult`, whose `data`
the socket then encodes once (`realtime.sockets`). A result with errors is never shared; any
other event is executed as graphql-core does. `outlive_graphql_shared_events_total{result}`
counts the chunks `executed` and those `shared`.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cache
from typing import Any

from graphql import ExecutionResult
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from outlive.schema.outputs import OutputChunk
from outlive.telemetry import metrics

SHARED_EVENTS = 256  # results kept: a few batches of chunks, each with its readers' operations

_Key = tuple[int, str, tuple[object, ...]]
_results: OrderedDict[_Key, tuple[object, ExecutionResult]] = OrderedDict()


class SharedEvents(StrawberryGraphQLCoreExecutionContext):
    """strawberry's graphql-core executor, with `OutputChunk` events executed once per chunk,
    operation and variables (see the module's docstring)."""

    def execute_operation(self, serially: bool | None = None) -> Any:
        event = self.root_value
        if not isinstance(event, OutputChunk):
            return super().execute_operation(serially)
        operation = self.operation
        key = (id(operation), _variables(self), _chunk_key(event))
        found = _results.get(key)
        if found is not None and found[0] is operation:  # the id is that operation's still
            _results.move_to_end(key)
            _counted("shared").inc()
            return found[1]
        _counted("executed").inc()
        result = super().execute_operation(serially)
        if isinstance(result, ExecutionResult) and not result.errors:
            _results[key] = (operation, result)  # the operation kept alive with its result
            if len(_results) > SHARED_EVENTS:
                _results.popitem(last=False)
        return result


@cache
def _counted(result: str) -> Any:
    """`outlive_graphql_shared_events_total{result}`, bound once per process."""
    return metrics.GRAPHQL_SHARED_EVENTS.labels(result=result)


def _chunk_key(chunk: OutputChunk) -> tuple[object, ...]:
    return (
        str(chunk.run_id),
        chunk.stream,
        chunk.cursor,
        chunk.text,
        chunk.done,
        chunk.kind,
        chunk.attempt,
        chunk.reset,
    )


def _variables(executor: StrawberryGraphQLCoreExecutionContext) -> str:
    coerced = executor.variable_values.coerced
    return repr(sorted(coerced.items())) if coerced else ""
