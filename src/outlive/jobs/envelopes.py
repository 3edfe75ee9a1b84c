"""The one jobs queue's envelope: `{id, type, payload, enqueued_at}`, a discriminated union on
`type`, declared here.

The type string is the versioning seam. A payload change that would break messages already in
flight ships as a new type (`…v2`) with its own handler while the old one drains, never as an edit
of an existing payload; there is no schema-version field, because the type already is one. Each
type has exactly one handler file in `outlive.jobs.handlers`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.alias_generators import to_camel

_KEYED = uuid.UUID("5d1e0f8a-31c4-4a47-9d3c-6f0e2b7a9c15")  # the namespace of keyed envelope ids


class Payload(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class DeliverWebhookV1(Payload):
    delivery_id: uuid.UUID


class SendInvitationV1(Payload):
    invitation_id: uuid.UUID


class ReplayRunsV1(Payload):
    replay_id: uuid.UUID
    tick: int = Field(ge=0)


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: uuid.UUID
    type: str
    payload: Payload
    enqueued_at: datetime
    # W3C trace context of the enqueue, when tracing is on. Optional and additive: messages
    # without it (every message before it existed, and every one sent with tracing off, which
    # leaves the key out) parse as before.
    traceparent: str | None = Field(None, max_length=128)


class InvalidJob(ValueError):
    """A job the producer refuses to send: the caller's error, raised where it was queued."""


class EnvelopeTypes:
    """The union of known envelope types; `parse` and `build` validate against it."""

    def __init__(self, payloads: Mapping[str, type[Payload]]) -> None:
        self.payloads = dict(payloads)
        variants: list[Any] = [
            create_model(
                f"Envelope_{name.replace('.', '_')}",
                __base__=Envelope,
                type=(cast(Any, Literal[name]), ...),
                payload=(model, ...),
            )
            for name, model in self.payloads.items()
        ]
        # A union built at run time: mypy cannot see it, pydantic checks it.
        union: Any = Annotated[Union[tuple(variants)], Field(discriminator="type")]  # noqa: UP007
        self._adapter: TypeAdapter[Envelope] = TypeAdapter(union)

    def with_type(self, name: str, payload: type[Payload]) -> EnvelopeTypes:
        return EnvelopeTypes({**self.payloads, name: payload})

    def build(self, type: str, payload: Mapping[str, Any], *, key: str | None = None) -> Envelope:
        """A new envelope; with a `key` (the row it serves), its id is derived from (type, key),
        so the same work queued twice is one job while the first is queued or running."""
        if type not in self.payloads:
            raise InvalidJob(f"unknown job type {type!r}")
        try:
            return self._adapter.validate_python(
                {
                    "id": uuid.uuid5(_KEYED, f"{type}:{key}") if key else uuid.uuid4(),
                    "type": type,
                    "payload": dict(payload),
                    "enqueued_at": datetime.now(UTC),
                }
            )
        except ValidationError as exc:
            raise InvalidJob(f"invalid {type} payload: {exc.errors(include_url=False)}") from exc

    def parse(self, raw: str | bytes) -> Envelope:
        """Raises pydantic's `ValidationError` for anything that is not a known envelope."""
        return self._adapter.validate_json(raw)

    @staticmethod
    def dump(envelope: Envelope) -> str:
        """The wire form; `traceparent` only when set, so untraced messages are unchanged (and
        a consumer of the previous release, whose model forbids the key, still takes them)."""
        return envelope.model_dump_json(
            by_alias=True, exclude={"traceparent"} if envelope.traceparent is None else None
        )


ENVELOPES = EnvelopeTypes(
    {
        "webhook.deliver.v1": DeliverWebhookV1,
        "email.invitation.v1": SendInvitationV1,
        "run.replay.v1": ReplayRunsV1,
    }
)
