"""Model usage: what a run's steps recorded (`Run.usage`) and its roll-up per UTC day and agent
(`usageTokens`).

A step records usage with `ctx.record_usage(...)` or by returning a value that carries `usage`
(`usage_in`); it is written with the step's journal row (`run_steps.requests`, `input_tokens`,
`output_tokens`, `model`, `cost_usd`), in the statement that records the step, so it is counted
exactly once: a step whose commit did not land (a crash, a cancel) records nothing, and its
replay by a later attempt records its usage then. The cost comes from the `genai-prices` package
(a maintained price table) when the usage is recorded; it is NULL when the model is not in it.
A sum is what was priced, with the models that were not named beside it (`unpriced_models`): one
unpriced model no longer hides a day's cost (round five, F12); NULL only when nothing was priced.
What a provider billed and no step kept (a call cut by a kill, a cancel, a timeout) is counted
apart (`abandoned_requests`, from `run_calls`: `services.runs.calls`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

from sqlalchemy import ARRAY, Uuid, bindparam, text

from outlive.db.raw import prepare
from outlive.db.tx import Db
from outlive.errors import BadUserInput
from outlive.ids import RunId, TenantId

log = logging.getLogger(__name__)

MAX_DAYS = 366
MAX_TOKENS = 10**12  # one call's count, as sanity


@dataclass(frozen=True, slots=True)
class StepUsage:
    """What one step's calls used: `cost_usd` None when a model was not in the price table."""

    requests: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    cost_usd: Decimal | None = None

    def __add__(self, other: StepUsage) -> StepUsage:
        cost = None
        if self.cost_usd is not None and other.cost_usd is not None:
            cost = self.cost_usd + other.cost_usd
        return StepUsage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            model=other.model or self.model,
            cost_usd=cost,
        )


def measured(
    *, input_tokens: int, output_tokens: int, model: str | None, requests: int = 1
) -> StepUsage:
    """One call's usage, priced (`cost_usd` None when the model is unknown)."""
    for count in (input_tokens, output_tokens, requests):
        if not isinstance(count, int) or not 0 <= count <= MAX_TOKENS:
            raise ValueError("usage counts are whole numbers from 0")
    return StepUsage(
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model=model,
        cost_usd=price(model, input_tokens, output_tokens),
    )


# `OUTLIVE_MODEL_PRICES`: (input, output) USD per million tokens of models the table lacks (or
# overrides). Set once per process by its runtime (`configure_prices`), like a table's rows.
_OVERRIDES: dict[str, tuple[Decimal, Decimal]] = {}


def configure_prices(prices: Mapping[str, Any]) -> None:
    """This process's `OUTLIVE_MODEL_PRICES` (each a mapping or object with `input`, `output`)."""
    _OVERRIDES.clear()
    for model, p in prices.items():
        got = p if isinstance(p, Mapping) else {"input": p.input, "output": p.output}
        _OVERRIDES[model] = (Decimal(str(got["input"])), Decimal(str(got["output"])))


def price(model: str | None, input_tokens: int, output_tokens: int) -> Decimal | None:
    """The cost in USD by `OUTLIVE_MODEL_PRICES`, else the `genai-prices` table; None when the
    model is in neither."""
    if not model:
        return None
    per_million = _OVERRIDES.get(model) or _prices(model)
    if per_million is None:
        return None
    per_input, per_output = per_million
    return (per_input * input_tokens + per_output * output_tokens) / 1_000_000


@lru_cache(maxsize=256)
def _prices(model: str) -> tuple[Decimal, Decimal] | None:
    """(input, output) USD per million tokens, looked up once per model and process."""
    try:
        from genai_prices import Usage, calc_price

        million = 1_000_000
        per_input = calc_price(Usage(input_tokens=million, output_tokens=0), model_ref=model)
        per_output = calc_price(Usage(input_tokens=0, output_tokens=million), model_ref=model)
    except LookupError:
        return None
    except Exception:
        log.warning("no price for model %r", model, exc_info=True)
        return None
    return Decimal(per_input.total_price), Decimal(per_output.total_price)


def usage_in(value: Any) -> StepUsage | None:
    """The usage a step's result carries, if any: a mapping (or object) with `usage` holding
    input and output token counts (`input_tokens`/`output_tokens`, `prompt_tokens`/
    `completion_tokens` or `inputTokens`/`outputTokens`) and maybe `model`."""
    usage = value.get("usage") if isinstance(value, Mapping) else getattr(value, "usage", None)
    if usage is None:
        return None
    fields = usage if isinstance(usage, Mapping) else getattr(usage, "__dict__", {})
    inputs = _first(fields, "input_tokens", "prompt_tokens", "inputTokens")
    outputs = _first(fields, "output_tokens", "completion_tokens", "outputTokens")
    if inputs is None and outputs is None:
        return None
    model = fields.get("model")
    if model is None and isinstance(value, Mapping):
        model = value.get("model")
    return measured(
        input_tokens=inputs or 0,
        output_tokens=outputs or 0,
        model=model if isinstance(model, str) else None,
    )


def _first(fields: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        found = fields.get(name)
        if isinstance(found, int) and not isinstance(found, bool):
            return found
    return None


@dataclass(frozen=True, slots=True)
class RunUsage:
    """What a run's steps recorded (`cost_usd`: the priced models' cost, None when no model was
    priced; `unpriced_models`: the models without a price), and what it was billed and never
    kept (`abandoned_*`: model calls cut before their step was recorded, `services.runs.calls`)."""

    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal | None
    unpriced_models: tuple[str, ...] = ()
    abandoned_requests: int = 0
    abandoned_input_tokens: int = 0
    abandoned_output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class UsageTokensDay:
    day: str
    agent: str
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal | None
    unpriced_models: tuple[str, ...] = ()


NONE = RunUsage(0, 0, 0, None)
UNNAMED = "(unnamed)"  # a step that recorded usage without a model
# The statements below are assembled from these constants only, at import: no value is pasted.
# A cost sums what was priced (a model the table lacks counts 0 and is named, round five F12);
# None when nothing was.
_COST = "sum(cost_usd) FILTER (WHERE requests > 0 AND cost_usd IS NOT NULL)"
_UNPRICED = (
    f"array_remove(array_agg(DISTINCT coalesce(model, '{UNNAMED}'))"
    " FILTER (WHERE requests > 0 AND cost_usd IS NULL), NULL)"
)
_STEP_COST = "sum(s.cost_usd) FILTER (WHERE s.requests > 0 AND s.cost_usd IS NOT NULL)"
_STEP_UNPRICED = (
    f"array_remove(array_agg(DISTINCT coalesce(s.model, '{UNNAMED}'))"
    " FILTER (WHERE s.requests > 0 AND s.cost_usd IS NULL), NULL)"
)
_OF_RUNS = prepare(
    text(
        "SELECT run_id, sum(requests) AS requests, sum(input_tokens) AS input_tokens,"  # noqa: S608
        f" sum(output_tokens) AS output_tokens, {_COST} AS cost_usd, {_UNPRICED} AS unpriced"
        " FROM run_steps WHERE run_id = ANY(:run_ids) AND requests > 0 GROUP BY run_id"
    ).bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
)
# A run's calls that no attempt still executes: abandoned (an attempt executing one is not).
_ABANDONED = prepare(
    text(
        "SELECT c.run_id, count(*) AS requests, sum(c.input_tokens) AS input_tokens,"
        " sum(c.output_tokens) AS output_tokens FROM run_calls c JOIN runs r ON r.id = c.run_id"
        " WHERE c.run_id = ANY(:run_ids) AND NOT (r.status = 'RUNNING' AND c.attempt = r.attempt"
        " AND c.ended_at IS NULL) GROUP BY c.run_id"
    ).bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
)
# Each run and its descendants (children, their children, …: at most 8 deep).
_TREES = (
    "WITH RECURSIVE tree(top, id) AS (SELECT id, id FROM runs WHERE id = ANY(:run_ids)"
    " UNION ALL SELECT tree.top, r.id FROM runs r JOIN tree ON r.parent_id = tree.id)"
)
_OF_TREES = prepare(
    text(
        f"{_TREES} SELECT tree.top AS run_id, sum(s.requests) AS requests,"  # noqa: S608
        " sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,"
        f" {_STEP_COST} AS cost_usd, {_STEP_UNPRICED} AS unpriced"
        " FROM tree JOIN run_steps s ON s.run_id = tree.id WHERE s.requests > 0"
        " GROUP BY tree.top"
    ).bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
)
_ABANDONED_OF_TREES = prepare(
    text(
        f"{_TREES} SELECT tree.top AS run_id, count(*) AS requests,"  # noqa: S608
        " sum(c.input_tokens) AS input_tokens, sum(c.output_tokens) AS output_tokens"
        " FROM tree JOIN run_calls c ON c.run_id = tree.id JOIN runs r ON r.id = c.run_id"
        " WHERE NOT (r.status = 'RUNNING' AND c.attempt = r.attempt AND c.ended_at IS NULL)"
        " GROUP BY tree.top"
    ).bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
)
# Live from the steps of the tenant's runs, plus what deleted steps recorded (`usage_kept_tokens`,
# `outlive.services.kept_usage`): retention and erasure never change a day's totals.
_TOKENS_DAYS = prepare(
    text(
        f"""SELECT day, agent, sum(input_tokens) AS input_tokens,
                  sum(output_tokens) AS output_tokens, sum(cost_usd) AS cost_usd,
                  array_remove(array_agg(DISTINCT unpriced), NULL) AS unpriced
             FROM (SELECT to_char((s.completed_at AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS day,
                          r.agent, s.input_tokens, s.output_tokens, s.cost_usd,
                          CASE WHEN s.cost_usd IS NULL THEN coalesce(s.model, '{UNNAMED}')
                          END AS unpriced
                     FROM runs r JOIN run_steps s ON s.run_id = r.id
                    WHERE r.tenant_id = :tenant_id AND r.created_at >= :runs_since
                      AND s.completed_at >= :since AND s.requests > 0
                   UNION ALL
                   SELECT to_char(day, 'YYYY-MM-DD'), agent, input_tokens, output_tokens, cost_usd,
                          CASE WHEN unpriced > 0 THEN coalesce(nullif(model, ''), '{UNNAMED}')
                          END
                     FROM usage_kept_tokens
                    WHERE tenant_id = :tenant_id AND day >= CAST(:since AS date)) used
            GROUP BY 1, 2 ORDER BY 1, 2"""  # noqa: S608 (a constant)
    )
)


async def usage_of_runs(
    db: Db, run_ids: Sequence[RunId], *, trees: bool = False
) -> dict[RunId, RunUsage]:
    """Each run's summed usage and abandoned calls (zeros when it has none), in two statements;
    `trees`: each run's and all its descendants' (`Run.treeUsage`). The runs were read
    tenant-scoped by the caller."""
    found = dict.fromkeys(run_ids, NONE)
    if not run_ids:
        return found
    ids = list(dict.fromkeys(run_ids))
    recorded = await db.all(_OF_TREES if trees else _OF_RUNS, run_ids=ids)
    abandoned = {
        RunId(row["run_id"]): row
        for row in await db.all(_ABANDONED_OF_TREES if trees else _ABANDONED, run_ids=ids)
    }
    for row in recorded:
        found[RunId(row["run_id"])] = RunUsage(
            int(row["requests"]),
            int(row["input_tokens"]),
            int(row["output_tokens"]),
            row["cost_usd"],
            tuple(sorted(row["unpriced"] or ())),
        )
    for run_id, row in abandoned.items():
        found[run_id] = replace(
            found[run_id],
            abandoned_requests=int(row["requests"]),
            abandoned_input_tokens=int(row["input_tokens"]),
            abandoned_output_tokens=int(row["output_tokens"]),
        )
    return found


async def usage_tokens(db: Db, tenant_id: TenantId, *, days: int) -> list[UsageTokensDay]:
    """Tokens and cost per UTC day and agent over the last `days` days (today included), by
    when each step completed. Steps of runs created more than a run's longest life before that
    are not looked at (`runs_since`: 31 days earlier)."""
    if not 1 <= days <= MAX_DAYS:
        raise BadUserInput(f"days must be between 1 and {MAX_DAYS}")
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since = today - timedelta(days=days - 1)
    rows = await db.all(
        _TOKENS_DAYS, tenant_id=tenant_id, since=since, runs_since=since - timedelta(days=31)
    )
    return [
        UsageTokensDay(
            row["day"],
            row["agent"],
            int(row["input_tokens"]),
            int(row["output_tokens"]),
            row["cost_usd"],
            tuple(sorted(row["unpriced"] or ())),
        )
        for row in rows
    ]
