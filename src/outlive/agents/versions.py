"""Code versions (contract §7 "Versions"): what an agent's `codeVersion` is.

An agent may declare its version (`Agent(..., version="2026-12-06")`): a deploy that changes
nothing a run could notice can then keep it. Otherwise its version is a hash of its code: the
source of the module its `run` function is defined in (a change anywhere in that module is a new
version, including to the functions its steps call) and its input's JSON Schema. The hash is
stable across processes and machines (no addresses, no mtimes): the worker records it on each
run when it starts (`Run.codeVersion`) and on each step it records (`run_steps.code_version`),
and `outlive replay` compares against it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from collections.abc import Mapping
from typing import Any

MAX_VERSION = 64
HASH_PREFIX = "h:"  # a computed version: "h:" and 16 hex digits
UNAVAILABLE = "unavailable"  # the version of an agent whose code failed to load


def check_version(version: str) -> None:
    """A declared version: 1 to 64 printable characters, not starting with the hash's prefix."""
    if (
        not isinstance(version, str)
        or not 0 < len(version) <= MAX_VERSION
        or not version.isprintable()
        or version.startswith(HASH_PREFIX)
    ):
        raise ValueError(
            f"an agent's version is 1 to {MAX_VERSION} printable characters, not starting"
            f" with {HASH_PREFIX!r} (computed versions do): {version!r}"
        )


def code_hash(name: str, input_schema: Mapping[str, Any], run: Any) -> str:
    """A hash of an agent's code: its `run` module's source (else its function's bytecode)
    and its input schema."""
    digest = hashlib.sha256()
    digest.update(name.encode())
    digest.update(json.dumps(input_schema, sort_keys=True).encode())
    digest.update(_source_of(run).encode())
    return HASH_PREFIX + digest.hexdigest()[:16]


_MODULES: dict[str, str] = {}  # a module's source digest, by name: read once per process


def _source_of(fn: Any) -> str:
    target = inspect.unwrap(fn)
    name = getattr(target, "__module__", "") or ""
    found = _MODULES.get(name)
    if found is not None:
        return found
    module = sys.modules.get(name)
    try:
        source = inspect.getsource(module if module is not None else target)
    except (OSError, TypeError):  # no source file (built at run time, a frozen module)
        code = getattr(target, "__code__", None)
        if code is None:
            return repr(getattr(target, "__qualname__", target))
        return repr((code.co_code, code.co_consts, code.co_names))
    found = hashlib.sha256(source.encode()).hexdigest()
    if module is not None:
        _MODULES[name] = found
    return found
