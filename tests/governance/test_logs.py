"""No payload is logged at INFO or above (issue 46, docs/governance.md "Logs"): a signal's
payload, the steps' results and the run's output that carry it, and what a model endpoint
answered, all stay out of every log record at INFO and above. (Names are identifiers, and are
logged: a signal's, a step's, a stream's.)"""

from __future__ import annotations

import logging
import uuid

import pytest
from pydantic_ai.exceptions import ModelHTTPError, UnexpectedModelBehavior

from outlive.agents.pydantic_ai.models import _fault
from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.governance.test_erasure import SIGNAL, start
from tests.support import Api, NudgeWatch, TenantHandle, settled

pytestmark = [pytest.mark.timeout(120)]


def logged_at_info(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records if r.levelno >= logging.INFO
    )


def test_a_model_endpoints_words_are_logged_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    marker = f"prompt-{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG)
    for exc in (
        ModelHTTPError(429, "m", body={"echo": marker}),
        ModelHTTPError(400, "m", body={"echo": marker}),
        UnexpectedModelBehavior(f"not a completion: {marker}"),
    ):
        _fault(exc)
    assert marker in caplog.text  # the operator can still see it, at DEBUG
    assert marker not in logged_at_info(caplog)


@pytest.mark.usefixtures("worker")
async def test_a_runs_payloads_are_never_logged_at_info(
    api: Api,
    tenant: TenantHandle,
    sessions: Sessions,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    marker = f"payload-{uuid.uuid4().hex}"
    async with NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watch:
        run_id = await start(api, tenant, ["logs"], turns=2, awaitSignal="reply")
        await watch.until(run_id, lambda r: r.status == "WAITING")
        signal = {"id": run_id, "name": "reply", "payload": {"note": marker}}
        await api.gql(SIGNAL, {"i": signal}, token=tenant.token)
        done = await watch.until(run_id, settled)
    assert marker in str(done.output)
    assert caplog.records  # the worker and the API did log, at INFO
    assert marker not in logged_at_info(caplog)
