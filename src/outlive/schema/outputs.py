"""`OutputChunk`: what the `runOutput` subscription sends (display text, never state)."""

from __future__ import annotations

import strawberry

from outlive.realtime.outputs import Chunk


@strawberry.type(
    description="A piece of a run's partial output (`ctx.stream`): display text, not state; "
    "the run's journal is the truth."
)
class OutputChunk:
    run_id: strawberry.ID
    stream: str = strawberry.field(description='The name the agent gave the stream ("answer").')
    cursor: str = strawberry.field(
        description="Opaque; pass it as `after` to resume after this chunk."
    )
    text: str
    done: bool = strawberry.field(description="The stream ended (its step completed or failed).")
    kind: str = strawberry.field(
        default="text",
        description='What the text is: "text", "tool_call" (a JSON line per call: id, tool, '
        'args), "tool_result" (a JSON line per outcome: id, tool, outcome, result or message) '
        'or "output" (the structured output\'s JSON, as it is written).',
    )
    attempt: int = strawberry.field(default=0, description="The attempt that wrote it.")
    reset: bool = strawberry.field(
        default=False,
        description="true: the stream of an earlier attempt (or an earlier call of this step) "
        "was abandoned; drop what it showed since its last `done`.",
    )

    @classmethod
    def of(cls, run_id: object, chunk: Chunk) -> OutputChunk:
        return cls(
            run_id=strawberry.ID(str(run_id)),
            stream=chunk.stream,
            cursor=chunk.cursor,
            text=chunk.text,
            done=chunk.done,
            kind=chunk.kind,
            attempt=chunk.attempt,
            reset=chunk.reset,
        )
