"""A step's value as it is recorded and given back: by the return annotation of its function,
through a pydantic `TypeAdapter` (cached per code object and annotation), encoded as JSON within
the step's size bound. Shared by the worker's journal, `outlive replay` and `--live-from`."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from functools import partial
from typing import Any

from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError

from outlive.errors import StepResultInvalid, StepTooLarge
from outlive.services.runs import MAX_STEP_BYTES

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_ADAPTERS: dict[tuple[Any, Any], TypeAdapter[Any]] = {}
MAX_CACHED_ADAPTERS = 10_000


def result_adapter(fn: Callable[..., Any], name: str) -> TypeAdapter[Any]:
    """How a step's value is recorded and given back: by the return annotation of `fn`. Cached
    per code object and annotation, so a step written as a closure in a loop costs one lookup."""
    target = fn
    while isinstance(target, partial):
        target = target.func
    target = getattr(target, "__func__", target)
    code = getattr(target, "__code__", None)
    raw = getattr(target, "__annotations__", {}).get("return", inspect.Signature.empty)
    if code is None or raw is inspect.Signature.empty:
        return _ANY
    try:
        key: tuple[Any, Any] | None = (code, raw)
        cached = _ADAPTERS.get((code, raw))
    except TypeError:  # an unhashable annotation object: resolve it every time
        key, cached = None, None
    if cached is not None:
        return cached
    try:
        annotation = typing.get_type_hints(target).get("return", Any)
        adapter: TypeAdapter[Any] = _ANY if annotation is Any else TypeAdapter(annotation)
    except Exception as exc:  # noqa: BLE001 (unresolvable, or not a type pydantic can record)
        raise StepResultInvalid(
            f"step {name!r}: its function's return annotation {raw!r} cannot be resolved to a"
            f" type pydantic records as JSON ({exc!r}); use a JSON-able type importable from"
            " the function's module"
        ) from None
    if key is not None and len(_ADAPTERS) < MAX_CACHED_ADAPTERS:
        _ADAPTERS[key] = adapter
    return adapter


def encode(adapter: TypeAdapter[Any], value: Any, name: str, occurrence: int) -> str:
    try:
        encoded = adapter.dump_json(value, by_alias=True)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise StepResultInvalid(
            f"step {name!r} (occurrence {occurrence}) returned a value that is not JSON: {exc}"
        ) from None
    if len(encoded) > MAX_STEP_BYTES:
        raise StepTooLarge(
            f"step {name!r} (occurrence {occurrence}) returned {len(encoded)} bytes of JSON;"
            f" a step's result is limited to {MAX_STEP_BYTES} bytes (16 MiB): store big values"
            " elsewhere and return a reference"
        )
    return encoded.decode()
