"""Run fields: `run`, `runs`, `startRun`, `cancelRun`, `signalRun`. Reads reconcile lost
instances."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Annotated, Any, cast

import strawberry
from strawberry.types.nodes import SelectedField, Selection

from outlive.db.models import RunStatus
from outlive.errors import BadUserInput
from outlive.resolvers.context import Context
from outlive.schema.runs import (
    Run,
    RunConnection,
    SignalRunPayload,
    StartRunPayload,
)
from outlive.schema.starts import SignalRunInput, StartRunInput
from outlive.services import runs as runs_service
from outlive.services import starts, waits
from outlive.services.ids import parse_uuid
from outlive.services.ratelimits import Bucket
from outlive.services.runs import RunOrder, RunRecord, children, lookup
from outlive.services.runs.keys import Debounce, start_options
from outlive.services.tokens import create_run_read_token as create_run_read_token_for
from outlive.workflows.reconcile import reconcile_runs

CANCEL_REASON_MAX = 500  # a line for the timeline, not a document

Info = strawberry.Info[Context, None]


async def _reconciled(ctx: Context, runs: list[RunRecord]) -> list[RunRecord]:
    s = ctx.services
    reconciled = await reconcile_runs(
        s.sessions,
        s.instances,
        runs,
        admission=s.admission,
        grace_s=s.settings.reconcile_grace_s,
    )
    return await ctx.opened(reconciled)  # sealed inputs and outputs, as they were given


async def run(info: Info, id: strawberry.ID) -> Run | None:
    ctx = info.context
    run_id = runs_service.parse_run_id(id)
    record = await runs_service.read_run(ctx.services.sessions, ctx.run_tenant(run_id), run_id)
    if record is None:
        return None
    (record,) = await _reconciled(ctx, [record])
    return Run.of(record)


async def create_run_read_token(
    info: Info,
    id: strawberry.ID,
    ttl_seconds: Annotated[
        int | None,
        strawberry.argument(description="How long it works (it also dies with this token)."),
    ] = 3600,
) -> str:
    ctx = info.context
    principal = ctx.require_member()
    run_id = runs_service.parse_run_id(id)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await create_run_read_token_for(
            uow,
            principal,
            run_id,
            ttl_s=3600 if ttl_seconds is None else ttl_seconds,
            max_ttl_s=ctx.services.settings.run_read_token_max_s,
        )


# The `runs(...)` filters' argument types, with their descriptions.
CreatedSince = Annotated[
    datetime | None, strawberry.argument(description="Only runs created at or after this.")
]
CreatedBefore = Annotated[
    datetime | None, strawberry.argument(description="Only runs created before this.")
]
Order = Annotated[
    RunOrder, strawberry.argument(description="Newest first (the default) or oldest first.")
]
Key = Annotated[
    str | None, strawberry.argument(description='Only runs of this key ("": the default).')
]
Tags = Annotated[
    list[str] | None, strawberry.argument(description="Only runs carrying all of these.")
]
TopLevel = Annotated[
    bool | None,
    strawberry.argument(
        description="Only top-level runs (no parent): child runs are left out. False or null:"
        " every run."
    ),
]
Paused = Annotated[
    bool | None,
    strawberry.argument(
        description="true: only runs held now by a pause or a budget; false: only runs not "
        "held; null: every run."
    ),
]


async def runs(
    info: Info,
    first: int | None = 20,
    after: str | None = None,
    status: list[RunStatus] | None = None,
    agent: str | None = None,
    created_since: CreatedSince = None,
    created_before: CreatedBefore = None,
    order: Order = RunOrder.NEWEST_FIRST,
    key: Key = None,
    tags: Tags = None,
    top_level: TopLevel = False,
    paused: Paused = None,
    schedule_id: Annotated[
        strawberry.ID | None, strawberry.argument(description="Only the runs of this schedule.")
    ] = None,
) -> RunConnection:
    ctx = info.context
    sessions, tenant_id = ctx.services.sessions, ctx.tenant_id
    filters: dict[str, Any] = {
        "statuses": status,
        "agent": agent,
        "since": created_since,
        "until": created_before,
        "key": key,
        "tags": tags,
        "top_level": bool(top_level),
        "paused": paused,
        "schedule_id": None if schedule_id is None else parse_uuid(schedule_id, what="schedule"),
    }
    page = await runs_service.read_runs(
        sessions,
        tenant_id,
        first=20 if first is None else first,
        after=after,
        order=order,
        **filters,
    )
    page.runs[:] = await _reconciled(ctx, page.runs)
    total = None
    if any(_selects(field.selections, "totalCount") for field in info.selected_fields):
        total = await runs_service.count_runs(sessions, tenant_id, **filters)
    return RunConnection.of(page, total)


def _selects(selections: Sequence[Selection], name: str) -> bool:
    """Whether these selections (through fragments, not below fields) include the field `name`."""
    return any(
        s.name == name if isinstance(s, SelectedField) else _selects(s.selections, name)
        for s in selections
    )


async def start_run(info: Info, input: StartRunInput) -> StartRunPayload:
    ctx = info.context
    s = ctx.services
    agent = s.agents.require(input.agent)
    params = agent.validate(cast(Any, input.input), settings=s.settings)  # nothing written yet
    options = start_options(
        key=input.key,
        default_key=agent.default_key(params) if input.key is None else "",
        on_conflict=input.on_conflict,
        default_on_conflict=agent.on_conflict,
        tags=input.tags,
        idempotency_key=input.idempotency_key,
        priority=input.priority,
        debounce=None
        if input.debounce is None
        else Debounce(input.debounce.seconds, input.debounce.max_seconds),
    )
    await s.limiter.take(
        Bucket("start-run", str(ctx.tenant_id), s.settings.rate_start_run),
        message="too many runs started: try again in a moment",
    )
    start = partial(
        starts.start,
        agent=agent.name,
        params=params,
        instances=s.instances,
        options=options,
        cipher=await ctx.write_cipher(),  # a tenant that encrypts: its input is sealed
    )
    if not options.in_a_transaction:
        # One idempotent write (insert, or read the active run): no transaction needed around it.
        async with s.sessions.unit(ctx.tenant_id, single_statement=True) as one:
            started = await start(one)
    else:  # a line to join, runs to cancel, a signal to deliver: one transaction
        async with s.sessions.unit(ctx.tenant_id) as uow:
            started = await start(uow)
    (shown,) = await ctx.opened([started.run])
    return StartRunPayload(run=Run.of(shown), created=started.created)


async def cancel_run(
    info: Info,
    id: strawberry.ID,
    cascade: Annotated[
        bool,
        strawberry.argument(
            description="true: its live descendants are cancelled too (those started with "
            "`abandon` aside); false: its children are left running, abandoned."
        ),
    ] = True,
    reason: Annotated[
        str | None,
        strawberry.argument(
            description="Why, in a line: recorded on its timeline (the `cancelled` or "
            "`cancel_requested` event) with who asked."
        ),
    ] = None,
) -> Run:
    ctx = info.context
    run_id = runs_service.parse_run_id(id)
    if reason is not None and len(reason) > CANCEL_REASON_MAX:
        raise BadUserInput(f"reason is at most {CANCEL_REASON_MAX} characters")
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        if not cascade:
            await children.abandon_children(uow, run_id)
        record = await runs_service.cancel_run(
            uow, run_id, by=ctx.require().user.email, reason=reason or None
        )
    (shown,) = await ctx.opened([record])
    return Run.of(shown)


async def signal_run(info: Info, input: SignalRunInput) -> SignalRunPayload:
    ctx = info.context
    s = ctx.services
    run_id = runs_service.parse_run_id(input.id)
    waits.check_name(input.name)  # BAD_USER_INPUT before a token is taken or a row written
    waits.encode_payload(input.payload)
    if input.wait_id is not None:
        waits.check_wait_id(input.wait_id)
    await s.limiter.take(
        Bucket("signal-run", str(ctx.tenant_id), s.settings.rate_signal_run),
        message="too many signals sent: try again in a moment",
    )
    cipher = await ctx.write_cipher()  # a tenant that encrypts: its payload is sealed
    async with s.sessions.unit(ctx.tenant_id) as uow:
        result = await waits.signal_run(
            uow,
            run_id,
            name=input.name,
            payload=input.payload,
            cipher=cipher,
            idempotency_key=input.idempotency_key,
            instances=s.instances,
            mailbox=waits.Mailbox(s.settings.signal_mailbox_max, s.settings.signal_mailbox_bytes),
            sender=ctx.require().user.email,
            wait_id=input.wait_id,
            check=s.agents.check_signal,  # what its agent declares (`Agent.signals`)
        )
    (shown,) = await ctx.opened([result.run])
    return SignalRunPayload(run=Run.of(shown), accepted=result.accepted)


async def runs_by_id_prefix(info: Info, prefix: str, first: int = 10) -> list[Run]:
    """The tenant's runs whose id starts with `prefix` (4 to 32 hex digits), newest first."""
    ctx = info.context
    found = await lookup.find_by_prefix(ctx.services.sessions, ctx.tenant_id, prefix, limit=first)
    return [Run.of(r) for r in await _reconciled(ctx, found)] if found else []
