"""Structured logs: JSON lines or text, with the tenant, run, job and trace of the work at hand.

`bind(tenant_id=…, run_id=…, job_id=…, agent=…)` stores the ids in context variables; every
record logged afterwards in the same task (a request, a job, a run attempt: each runs in a task of
its own) gets them as fields, plus `trace_id` when tracing is on. Nothing is passed around by
hand.

`setup(fmt, level, libraries_level)` installs one handler on the root logger:

- `json`: one JSON object per line (`time`, `level`, `logger`, `message`, the ids when known,
  `exc_info` when there is one), for a log pipeline;
- `text`: `time level logger message [tenant=… run=…]`, for people (`outlive dev`).

Third-party INFO chatter (pgserver, alembic, uvicorn's access log, saq, httpx) is held at
`libraries_level` (WARNING by default), so what `outlive dev` prints is what its user needs.

ERROR means someone should look. saq has one way to retry a job, an exception, and logs every
exception a job raises at ERROR with its traceback; so a retry Outlive asks for by design (a
run's `RetryLater`, a webhook delivery that will be tried again) raises an `ExpectedRetry`, and
`QuietRetries` (installed by `setup` on saq's logger) rewrites saq's record of it to one line at
the exception's `log_level` (WARNING, or INFO for a routine one), with no traceback.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from pythonjsonlogger.json import JsonFormatter

from outlive.telemetry import tracing

FIELDS = ("tenant_id", "run_id", "job_id", "agent")
LIBRARIES = (
    "pgserver",
    "alembic",
    "uvicorn.access",
    "saq",
    "httpx",
    "httpcore",
    "aiosmtplib",
    "asyncio",
    "opentelemetry",
    "watchfiles",
)

_vars: dict[str, ContextVar[str | None]] = {
    name: ContextVar(f"outlive_log_{name}", default=None) for name in FIELDS
}


def bind(**ids: UUID | str | None) -> None:
    """Attach ids to the log lines of the current task (and of tasks it starts from now on)."""
    for name, value in ids.items():
        _vars[name].set(None if value is None else str(value))


def current() -> dict[str, str]:
    """The ids bound in this context, and the trace id when tracing is on."""
    found = {name: value for name, var in _vars.items() if (value := var.get()) is not None}
    trace_id = tracing.current_trace_id()
    if trace_id is not None:
        found["trace_id"] = trace_id
    return found


class ExpectedRetry(Exception):
    """Raised to ask the job engine for a retry, by design: logged at `log_level`, no traceback."""

    log_level: int = logging.WARNING


class QuietRetries(logging.Filter):
    """On saq's logger: its `logger.exception("Error processing job …")` for an `ExpectedRetry`
    becomes one line at the exception's level (dropped when the logger is not enabled for it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, ExpectedRetry):
            return True
        level = exc.log_level
        if not logging.getLogger(record.name).isEnabledFor(level):
            return False
        job = record.args[0] if isinstance(record.args, tuple) and record.args else None
        record.levelno, record.levelname = level, logging.getLevelName(level)
        record.msg = "job %s (%s) will be retried: %s"
        record.args = (getattr(job, "key", "?"), getattr(job, "function", "?"), exc)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def quiet_expected_retries(logger_name: str = "saq") -> None:
    """Install `QuietRetries` on `logger_name` (once)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, QuietRetries) for f in logger.filters):
        logger.addFilter(QuietRetries())


class ContextFilter(logging.Filter):
    """Stamps the bound ids on every record (as attributes, None when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _vars.items():
            setattr(record, name, var.get())
        record.trace_id = tracing.current_trace_id()
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = [
            f"{name.removesuffix('_id')}={value}"
            for name in (*FIELDS, "trace_id")
            if (value := getattr(record, name, None))
        ]
        if not ids:
            return line
        head, sep, rest = line.partition("\n")  # after the message, before a traceback
        return f"{head} [{' '.join(ids)}]{sep}{rest}"


class JsonLineFormatter(JsonFormatter):
    """python-json-logger, with stable key names and no null ids."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            datefmt="%Y-%m-%dT%H:%M:%S%z",
        )

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        for name in (*FIELDS, "trace_id"):
            if log_data.get(name) is None:
                log_data.pop(name, None)
        return log_data


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonLineFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {fmt!r} (json or text)")


def setup(fmt: str, *, level: str = "INFO", libraries_level: str = "WARNING") -> None:
    """One handler on the root logger (replacing any), writing to stderr; idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(libraries_level.upper())
    quiet_expected_retries()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()  # uvicorn's own handlers would print a second format
        uvicorn_logger.propagate = True
