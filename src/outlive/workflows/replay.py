"""`outlive replay`: today's code against recorded runs, in-process and offline (issue 43).

Each run's agent is run with a `ReplayContext` (`workflows.replay_context`): the journal answers
every recorded step, nothing is written, and the whole replay runs under the network guard
(`workflows.offline`): a model call or any connection the code tries outside a step fails, and
the run's verdict says so. One verdict per run (contract §1, §7 "Versions"):

- `compatible`: the code reaches every recorded step, each result still validates, and it got
  to where the run is (its end, or the step, wait or child it would go on from);
- `patched`: compatible, through the old branch of a `ctx.patched` (the patch is still needed:
  once no run is `patched` by it, its old branch can go, docs/versions.md);
- `diverged at <step> #<n>: <why>`: a step the journal does not have where recorded steps
  remain, or a recorded step the code no longer reaches; also an agent no longer installed, an
  input that no longer validates, code that raises where the run did not fail, or that tries
  the network;
- `output invalid: <step> #<n>: <why>`: a recorded result (or the run's output) that no longer
  validates.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, cast

from outlive.agents.registry import AgentRegistry, RunContext
from outlive.config import Settings
from outlive.services.runs.recorded import Recorded
from outlive.workflows.offline import Guard, offline
from outlive.workflows.replay_context import ReplayContext, Stop
from outlive.workflows.versions import VersionDiverged

Kind = Literal["compatible", "patched", "diverged", "output invalid"]
KINDS: tuple[Kind, ...] = ("compatible", "patched", "diverged", "output invalid")
REPLAY_TIMEOUT_S = 10.0  # one run's replay: code that awaits anything else stops here


@dataclass(frozen=True, slots=True)
class Verdict:
    run_id: str
    tenant_id: str
    agent: str
    status: str
    code_version: str | None  # the run's (when it started)
    kind: Kind
    verdict: str  # the line: "compatible", "diverged at fetch #1: ..."
    answered: int  # steps the journal answered
    recorded: int  # steps the run recorded
    ms: float

    def as_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "tenantId": self.tenant_id,
            "agent": self.agent,
            "status": self.status,
            "codeVersion": self.code_version,
            "kind": self.kind,
            "verdict": self.verdict,
            "answered": self.answered,
            "recorded": self.recorded,
            "ms": round(self.ms, 3),
        }


def _diverged(step: str, why: str) -> tuple[Kind, str]:
    return "diverged", f"diverged at {step}: {why}"


def _of(diverged: VersionDiverged) -> tuple[Kind, str]:
    return ("output invalid" if diverged.kind == "output invalid" else "diverged"), diverged.verdict


def _raised(context: ReplayContext, exc: BaseException, status: str) -> tuple[Kind, str] | None:
    """The code raised: fine when the run failed too and the code got past its steps."""
    text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    ahead = context.cursor.next_recorded()
    if ahead is not None:
        return _diverged(f"{ahead[0]} #{ahead[1]}", f"the code raised {text} before reaching it")
    if status == "FAILED":
        return None
    return _diverged("end #0", f"the code raised {text} where the run did not fail")


async def _replay(
    recorded: Recorded, registry: AgentRegistry, settings: Settings
) -> tuple[Kind, str, int]:
    run = recorded.run
    agent = registry.get(run.agent)
    if agent is None:
        kind, line = _diverged("start #0", f"agent {run.agent!r} is not installed here")
        return kind, line, 0
    context = ReplayContext(recorded, settings)
    try:
        params = agent.parse(run.input)
    except ValueError as exc:
        kind, line = _diverged(
            "start #0", f"its input no longer validates ({exc.__class__.__name__})"
        )
        return kind, line, 0
    try:
        async with asyncio.timeout(REPLAY_TIMEOUT_S):
            output = await agent.run(cast(RunContext, context), params)
    except Stop as stop:
        if stop.diverged is not None:
            return (*_of(stop.diverged), context.answered)
    except TimeoutError:
        kind, line = _diverged("end #0", f"the replay did not finish in {REPLAY_TIMEOUT_S:g} s")
        return kind, line, context.answered
    except Exception as exc:  # noqa: BLE001 (the agent's code raised: judged against the run)
        found = _raised(context, exc, run.status.value)
        if found is not None:
            return (*found, context.answered)
    else:
        try:
            json.dumps(output)
        except (TypeError, ValueError) as exc:
            return "output invalid", f"output invalid: the run's output is not JSON ({exc})", 0
        if (ended := context.cursor.ended()) is not None:
            return (*_of(ended), context.answered)
    if context.old_branches:
        return (
            "patched",
            "patched (" + ", ".join(sorted(set(context.old_branches))) + ")",
            context.answered,
        )
    return "compatible", "compatible", context.answered


async def replay_runs(
    runs: Iterable[Recorded], registry: AgentRegistry, settings: Settings, guard: Guard
) -> list[Verdict]:
    """A verdict per run, each replayed under the network guard (`guard` counts what it
    refused)."""
    verdicts = []
    with offline(guard):
        for recorded in runs:
            started, refused = time.perf_counter(), guard.refused
            kind, line, answered = await _replay(recorded, registry, settings)
            if guard.refused > refused:  # whatever the code made of the refusal
                kind, line = _diverged(
                    "network #0", f"the code tried the network outside a step ({guard.last})"
                )
            run = recorded.run
            verdicts.append(
                Verdict(
                    run_id=str(run.id),
                    tenant_id=str(run.tenant_id),
                    agent=run.agent,
                    status=run.status.value,
                    code_version=run.code_version,
                    kind=kind,
                    verdict=line,
                    answered=answered,
                    recorded=sum(
                        1 for name, _ in recorded.steps if not name.startswith("patched:")
                    ),
                    ms=(time.perf_counter() - started) * 1000,
                )
            )
    return verdicts
