"""Cold start's budget (issue 47): `outlive --help` loads argparse and the CLI's own table, not
pydantic, the settings or any command's code; the API and the worker register the built-in
agents without pydantic-ai or the openai SDK, which a worker imports in a thread once it is up
(`Agent.warm`). Counted in modules (`sys.modules`), not timed: `bench/cold_start.py` times
them."""

from __future__ import annotations

import ssl
import subprocess
import sys
from contextlib import AsyncExitStack
from typing import Any

import pytest

from outlive.runtime import _load_tls, _open_http

HELP_MODULES = 110  # 93 measured (Python 3.11): the interpreter's own, argparse, outlive.cli
HEAVY = ("pydantic", "sqlalchemy", "redis", "httpx", "pydantic_ai", "openai", "outlive.config")


def _loaded(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running `code` (not those marked absent)."""
    tail = (
        "\nimport sys\nprint('\\n'.join(sorted(m for m, v in sys.modules.items()"
        " if v is not None)), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code + tail], capture_output=True, text=True, check=True
    )
    return done.stderr.split()


def test_help_loads_the_cli_table_only() -> None:
    modules = _loaded(
        "import sys; sys.argv = ['outlive', '--help']\n"
        "from outlive.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY)
    assert "outlive.cli" in modules
    assert not heavy, heavy
    assert len(modules) <= HELP_MODULES, (len(modules), modules)


def test_the_api_registers_the_builtin_agents_without_pydantic_ai_or_openai() -> None:
    modules = set(
        _loaded(
            "import outlive.app\n"
            "from outlive.agents.registry import AgentRegistry\n"
            "assert len(AgentRegistry.from_entry_points([], builtin=('demo', 'llm'))) == 2"
        )
    )
    assert "outlive.agents.llm" in modules
    assert not {"pydantic_ai", "openai", "outlive.agents.llm_chat"} & modules


def test_a_worker_warms_what_its_agents_need() -> None:
    modules = set(
        _loaded(
            "import asyncio\n"
            "from outlive.agents.registry import AgentRegistry\n"
            "registry = AgentRegistry.from_entry_points([], builtin=('llm',))\n"
            "asyncio.run(registry.warm_up())"
        )
    )
    assert {"pydantic_ai", "openai", "outlive.agents.llm_chat"} <= modules


def test_a_worker_imports_no_command_line_client_of_httpx() -> None:
    """httpx loads its CLI (click, rich, pygments) when they are installed; `outlive` marks it
    absent before httpx is imported (`outlive/__init__.py`)."""
    modules = set(_loaded("import outlive.worker\nimport httpx\nassert httpx.main is not None"))
    assert "httpx" in modules
    assert not {"httpx._main", "rich", "pygments"} & modules


async def test_the_worker_s_http_pools_load_the_ca_bundle_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx makes a TLS context per transport unless given one, loading the CA bundle each
    time (30 to 60 ms); the worker's three pools share one (`runtime._open_http`)."""
    loads: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    async with AsyncExitStack() as stack:
        await _open_http(stack, await _load_tls(stack))
    assert len(loads) == 1
