"""The GraphQL documents the client sends. The selection of each type is built from its model's
fields (`types`), so a model and what is asked for it never differ; CI validates every document
against the served schema (`outlive schema`)."""

from __future__ import annotations

from pydantic import BaseModel

from outlive.client import types


def fields(model: type[BaseModel]) -> str:
    """The selection set of `model`: its fields by alias, nested models selected in turn."""
    parts = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        nested = _nested(info.annotation)
        parts.append(f"{alias} {{ {fields(nested)} }}" if nested is not None else alias)
    return " ".join(parts)


def _nested(annotation: object) -> type[BaseModel] | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


RUN = fields(types.Run)

START_RUN = (
    "mutation StartRun($input: StartRunInput!) {"
    f" startRun(input: $input) {{ {fields(types.StartRunPayload)} }} }}"
)
GET_RUN = f"query Run($id: ID!) {{ run(id: $id) {{ {RUN} }} }}"
LIST_RUNS = (
    "query Runs($first: Int, $after: String, $status: [RunStatus!], $agent: String,"
    " $createdSince: DateTime, $createdBefore: DateTime, $order: RunOrder!, $key: String,"
    " $tags: [String!], $topLevel: Boolean, $paused: Boolean, $scheduleId: ID) {"
    " runs(first: $first, after: $after, status: $status, agent: $agent,"
    " createdSince: $createdSince, createdBefore: $createdBefore, order: $order, key: $key,"
    " tags: $tags, topLevel: $topLevel, paused: $paused, scheduleId: $scheduleId)"
    f" {{ {fields(types.RunConnection)} }} }}"
)
RUN_EVENTS = (
    "query RunEvents($id: ID!, $after: Int, $first: Int) {"
    f" run(id: $id) {{ events(after: $after, first: $first) {{ {fields(types.RunEvent)} }} }} }}"
)
RUN_STEPS = (
    "query RunSteps($id: ID!, $after: Int, $first: Int) {"
    f" run(id: $id) {{ steps(after: $after, first: $first) {{ {fields(types.RunStep)} }} }} }}"
)
CANCEL_RUN = f"mutation CancelRun($id: ID!) {{ cancelRun(id: $id) {{ {RUN} }} }}"
SIGNAL_RUN = (
    "mutation SignalRun($input: SignalRunInput!) {"
    f" signalRun(input: $input) {{ {fields(types.SignalRunPayload)} }} }}"
)
CREATE_RUN_READER = (
    "mutation CreateRunReadToken($id: ID!, $ttlSeconds: Int) {"
    " createRunReadToken(id: $id, ttlSeconds: $ttlSeconds) }"
)
RUN_OUTPUT = (
    "subscription RunOutput($id: ID!, $after: String) {"
    f" runOutput(id: $id, after: $after) {{ {fields(types.OutputChunk)} }} }}"
)

ALL = {
    "StartRun": START_RUN,
    "Run": GET_RUN,
    "Runs": LIST_RUNS,
    "RunEvents": RUN_EVENTS,
    "RunSteps": RUN_STEPS,
    "CancelRun": CANCEL_RUN,
    "SignalRun": SIGNAL_RUN,
    "CreateRunReadToken": CREATE_RUN_READER,
    "RunOutput": RUN_OUTPUT,
}
