"""`SharedEvents` shares a `runOutput` chunk's result among its readers: sound only while an
`OutputChunk`'s fields are plain values that read nothing but the chunk."""

from __future__ import annotations

from strawberry.types.base import get_object_definition

from outlive.schema.outputs import OutputChunk


def test_an_output_chunks_fields_read_nothing_but_the_chunk() -> None:
    definition = get_object_definition(OutputChunk, strict=True)
    with_resolvers = [f.name for f in definition.fields if f.base_resolver is not None]
    assert with_resolvers == []  # a resolver could read the context: readers' results would differ
