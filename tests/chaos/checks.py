"""The invariants of the chaos run, checked against the database and what the webhook receiver
and the clients saw; and the recovery figures measured from them.

- every run settled (none `stranded`), SUCCEEDED unless it asked to fail (`failed`; with
  `Plan.postgres_only` a run FAILED for a queue outage counts too);
- timelines gap-free with one terminal event, last; as many `claimed` events as attempts;
- no attempt claimed while another one was alive (`concurrent_attempts`, the "doubled");
- one webhook received for every settled run, under one `webhook-id` (repeats of the same id
  are allowed: delivery is at least once). Deliveries are never read, neither through the API
  (a read repairs what it finds) nor from the table: the receiver is the witness;
- while PostgreSQL was down (and for `pg_recovery_target_s` after it answered again) every
  mutation was answered `SERVICE_UNAVAILABLE`, nothing else (a request sent just before it died
  and answered after is in that window too); outside that window no request was answered an
  error (bar QUEUE_UNAVAILABLE without `postgres_only`, and RATE_LIMITED), though a request to
  a killed API may get no answer at all.

Figures: after each Redis fault, the time from Redis answering again to every unfinished run
showing life (its next timeline event other than `failed`: a run settled FAILED by a repair was
lost, not handed over) and every webhook it owed arriving (`handover_s`); after
the PostgreSQL fault, the time to the first successful mutation (`pg_recovery_s`, in schedule.py).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from tests.chaos.schedule import REDIS

if TYPE_CHECKING:
    from tests.chaos.harness import Plan, Report, Webhooks

TERMINAL = ("succeeded", "failed", "cancelled")
ACTIVE = ("QUEUED", "RUNNING")
TOLERATED = ("RATE_LIMITED",)  # answered with retryAfter, nothing changed: the client waits


async def check(
    plan: Plan, database_url: str, report: Report, webhooks: Webhooks, kills: list[float]
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        runs = await conn.fetch("SELECT * FROM runs")
        events: dict[Any, list[Any]] = defaultdict(list)
        for row in await conn.fetch(
            "SELECT run_id, seq, type, data, at FROM run_events ORDER BY run_id, seq"
        ):
            events[row["run_id"]].append(row)
    finally:
        await conn.close()
    report.runs = len(runs)
    for run in runs:
        _check_run(plan, run, events[run["id"]], report, kills)
    _check_webhooks(runs, webhooks, report)
    _check_client_errors(plan, report)
    _check_recovery(report)
    _handover(runs, events, webhooks, report)


def _check_run(
    plan: Plan, run: Any, timeline: list[Any], report: Report, kills: list[float]
) -> None:
    name = str(run["id"])
    types = [e["type"] for e in timeline]
    report.lost_attempts += dict(run).get("lost_attempts", 0)
    if run["status"] in ACTIVE:
        report.stranded += 1
        report.violations.append(f"{name}: stranded {run['status']}: {types}")
        return
    excused = not plan.postgres_only and "queue unavailable" in (run["error"] or "")
    if run["status"] == "FAILED" and not excused:
        report.failed += 1
        report.violations.append(f"{name}: failed: {run['error']}")
    if [t for t in types if t in TERMINAL] != [types[-1]] or types[-1] not in TERMINAL:
        report.violations.append(f"{name}: terminal events {types}")
    if [e["seq"] for e in timeline] != list(range(1, len(timeline) + 1)):
        report.violations.append(f"{name}: seq not gap-free")
    if types.count("claimed") != run["attempt"]:
        report.violations.append(
            f"{name}: {types.count('claimed')} claims, attempt {run['attempt']}"
        )
    _check_attempts(plan, name, timeline, report, kills)


def _check_attempts(
    plan: Plan, name: str, timeline: list[Any], report: Report, kills: list[float]
) -> None:
    """Attempt k+1 may only be claimed after attempt k ended (`retrying`, `released`) or was
    lost; a lost attempt's last sign of life is more than a lease before the next claim."""
    last_at: datetime | None = None  # the current attempt's latest event
    ended = lost = gone = False
    for event in timeline:
        kind = event["type"]
        if kind == "claimed":
            if last_at is not None:
                gap = (event["at"] - last_at).total_seconds()
                # Before a lease is over only when PostgreSQL saw the holder's process end (a
                # SIGKILL in between): docs/liveness.md.
                died = (
                    gone
                    and _killed(kills, last_at.timestamp(), event["at"].timestamp()) is not None
                )
                if not (ended or lost) or (lost and gap <= plan.heartbeat_s and not died):
                    report.concurrent_attempts += 1
                    report.violations.append(
                        f"{name}: attempt claimed {gap:.3f}s after the last"
                        + _nearest_kill(kills, last_at.timestamp())
                    )
                if lost:
                    _reclaim_latency(event["at"].timestamp(), last_at.timestamp(), report, kills)
            ended = lost = False
        elif kind in ("retrying", "released"):
            ended = True
        elif kind == "lost":
            lost = True
            gone = _reason(event) == "its worker process ended"
            continue  # the lost attempt's last sign of life stays `last_at`
        last_at = event["at"]


# A statement a worker sent just before its SIGKILL can still run on the server after it, and its
# event is stamped then: under the CPU starvation fault, up to this long after the kill (CI saw a
# run's last event 0.116 s before its take-over, both after the kill that had ended its worker).
IN_FLIGHT_S = 0.5


def _killed(kills: list[float], alive: float, claimed: float) -> float | None:
    """The first SIGKILL that can have ended an attempt last seen alive at `alive` (allowing for
    a statement in flight) and taken over at `claimed`."""
    return next((k for k in kills if alive - IN_FLIGHT_S <= k <= claimed), None)


def _nearest_kill(kills: list[float], at: float) -> str:
    """For a violation's message: the SIGKILL nearest to `at`, relative to it."""
    if not kills:
        return ""
    nearest = min(kills, key=lambda k: abs(k - at))
    return f" (nearest SIGKILL {nearest - at:+.3f}s from it)"


def _reason(event: Any) -> str | None:
    data = event.get("data")
    if isinstance(data, str):
        data = json.loads(data)
    return data.get("reason") if isinstance(data, dict) else None


def _reclaim_latency(claimed: float, alive: float, report: Report, kills: list[float]) -> None:
    """From the SIGKILL that took the attempt's worker (the first after its last sign of life)
    to the claim that took the run over."""
    if (death := _killed(kills, alive, claimed)) is not None:
        report.reclaim_s.append(claimed - death)


def _check_webhooks(runs: list[Any], webhooks: Webhooks, report: Report) -> None:
    """One webhook per settled run (one endpoint per tenant, subscribed to every event)."""
    owed = {str(r["id"]) for r in runs if r["status"] not in ACTIVE}
    seen = webhooks.first_seen.keys()
    report.deliveries = len(owed)
    report.delivered = len(owed & seen)
    report.unseen_webhook_ids = len(owed - seen)
    report.violations += [f"{run}: settled, and its webhook never arrived" for run in owed - seen]
    ids: dict[str, set[str]] = defaultdict(set)
    for _, webhook_id, run in webhooks.arrivals:
        ids[run].add(webhook_id)
    report.webhook_repeats = len(webhooks.arrivals) - sum(len(i) for i in ids.values())
    for run, distinct in ids.items():
        if len(distinct) > 1:
            report.violations.append(f"{run}: {len(distinct)} deliveries (webhook-ids)")
    for run in seen - {str(r["id"]) for r in runs}:
        report.violations.append(f"{run}: a webhook for a run that does not exist")


def _check_client_errors(plan: Plan, report: Report) -> None:
    """Every answer the clients got, against the fault windows (see the module docstring)."""
    pg = [w for w in report.windows if w.kind == "postgres"]
    wrong: dict[str, list[float]] = defaultdict(list)  # what went wrong → when (from the start)
    began = min((w.start for w in report.windows), default=0.0)
    for e in report.client_errors:
        # In flight while PostgreSQL was down: sent before it died and answered after counts.
        if any(e.at <= w.end + plan.pg_recovery_target_s and w.start <= e.answered for w in pg):
            if e.mutation and (e.code, e.status) != ("SERVICE_UNAVAILABLE", 503):
                report.mutation_errors_pg_down += 1
                wrong[
                    f"{e.op} answered {e.code} (HTTP {e.status}) while PostgreSQL was down"
                ].append(e.at - began)
            continue
        if e.status is None or e.code.startswith("HTTP 5") or e.code in TOLERATED:
            continue  # no answer (a killed API), or a bare 5xx: the client sends it again
        if e.code == "QUEUE_UNAVAILABLE" and not plan.postgres_only:
            continue  # issue 9's contract: the client retries
        wrong[f"{e.op} answered {e.code} (HTTP {e.status})"].append(e.at - began)
    faults = ", ".join(
        f"{w.kind} +{w.start - began:.1f}→+{w.end - began:.1f} s" for w in report.windows
    )
    for what, ats in wrong.items():
        report.violations.append(
            f"{what}: {len(ats)} times, first at +{min(ats):.1f} s (faults: {faults})"
        )


def _check_recovery(report: Report) -> None:
    returns = sum(w.kind == "postgres" for w in report.windows)
    if len(report.pg_recovery_s) < returns:
        report.violations.append("no mutation succeeded after PostgreSQL answered again")


def _handover(
    runs: list[Any], events: dict[Any, list[Any]], webhooks: Webhooks, report: Report
) -> None:
    """For each Redis fault, from Redis answering again (`back`): every run created before and
    unfinished at `back` must show life again (its next event, bar `failed`: a run settled
    FAILED by a repair was lost, not handed over), and every webhook owed by a run settled
    before `back` and not yet received must arrive. An item still waiting from an earlier
    fault is counted there only; one that never moves is counted in `never_handed_over`."""
    windows = sorted((w for w in report.windows if w.kind in REDIS), key=lambda w: w.end)
    for run in runs:
        lives = [e["at"].timestamp() for e in events[run["id"]] if e["type"] != "failed"]
        arrived = webhooks.first_seen.get(str(run["id"]))
        created = run["created_at"].timestamp()
        finished = run["finished_at"].timestamp() if run["finished_at"] else math.inf
        waiting_until = -math.inf  # counted at an earlier fault and still waiting until then
        for window in windows:
            back = window.end
            if created >= back or waiting_until > back:
                continue
            if finished > back:
                moved = next((t for t in lives if t > back), None)
            elif arrived is not None and arrived <= back:
                continue  # delivered before the fault was over: nothing was lost
            else:
                moved = arrived
            if moved is None:
                never = report.never_handed_over
                never[window.kind] = never.get(window.kind, 0) + 1
                waiting_until = math.inf
            else:
                report.handover_s.setdefault(window.kind, []).append(moved - back)
                waiting_until = moved
