"""The root types, and the strawberry schema made of them.

The extensions (limits, error codes) are given by `outlive.graphql.schema`, which builds the
schema the app serves; without them (`outlive schema`) the SDL is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.types import ExecutionContext

from outlive.resolvers import budgets as budget_fields
from outlive.resolvers import bulk_cancels as bulk_cancel_fields
from outlive.resolvers import governance as governance_fields
from outlive.resolvers import invitations as invitation_fields
from outlive.resolvers import members as member_fields
from outlive.resolvers import nudges as nudge_fields
from outlive.resolvers import outputs as output_fields
from outlive.resolvers import replays as replay_fields
from outlive.resolvers import runs as run_fields
from outlive.resolvers import schedules as schedule_fields
from outlive.resolvers import tenants as tenant_fields
from outlive.resolvers import usage as usage_fields
from outlive.resolvers import webhooks as webhook_fields
from outlive.schema.agents import Agent
from outlive.schema.budgets import AgentState, Budget
from outlive.schema.governance import ErasureReceipt, PayloadRange
from outlive.schema.invitations import AcceptInvitationPayload, Invitation, InvitationCode
from outlive.schema.members import Member
from outlive.schema.nudges import Nudge
from outlive.schema.outputs import OutputChunk
from outlive.schema.replays import RunReplay
from outlive.schema.runs import Run, RunConnection, SignalRunPayload, StartRunPayload
from outlive.schema.schedules import Schedule
from outlive.schema.tenants import Tenant, Viewer
from outlive.schema.usage import AgentStats, UsageDay, UsageTokensDay
from outlive.schema.webhooks import (
    CreateWebhookEndpointPayload,
    RedeliverFailedWebhooksPayload,
    RetryPendingWebhookDeliveriesPayload,
    WebhookDelivery,
    WebhookEndpoint,
)


@strawberry.type
class Query:
    viewer: Viewer = strawberry.field(resolver=tenant_fields.viewer)
    agents: list[Agent] = strawberry.field(resolver=tenant_fields.agents)
    run: Run | None = strawberry.field(resolver=run_fields.run)
    payload: PayloadRange = strawberry.field(
        resolver=governance_fields.payload,
        description="A range of a large payload the run holds (a step's result or the run's "
        'output that reads `{"$blob": ref, "size": n}`), at most 1 MiB (1048576 bytes) at once.',
    )
    runs: RunConnection = strawberry.field(resolver=run_fields.runs)
    runs_by_id_prefix: list[Run] = strawberry.field(
        resolver=run_fields.runs_by_id_prefix,
        description="The runs whose id starts with `prefix` (4 to 32 hex digits, dashes ignored), "
        "newest first, at most `first` (20): the console's short ids.",
    )
    webhook_endpoints: list[WebhookEndpoint] = strawberry.field(
        resolver=webhook_fields.webhook_endpoints
    )
    webhook_endpoint: WebhookEndpoint | None = strawberry.field(
        resolver=webhook_fields.webhook_endpoint,
        description="One of the tenant's endpoints (null: no such endpoint of this tenant), to "
        "page and filter its deliveries on their own.",
    )
    webhook_delivery: WebhookDelivery | None = strawberry.field(
        resolver=webhook_fields.webhook_delivery,
        description="One of the tenant's deliveries (null: no such delivery of this tenant), "
        "with its attempt log.",
    )
    invitations: list[Invitation] = strawberry.field(resolver=invitation_fields.list_invitations)
    invitation_code: InvitationCode = strawberry.field(
        resolver=invitation_fields.invitation_code,
        description="No bearer token: what accepting this code would do now (nothing is "
        "changed), for the accept page to say at once that a link is revoked, used or expired. "
        "Limited per client as acceptInvitation is.",
    )
    budgets: list[Budget] = strawberry.field(
        resolver=budget_fields.list_budgets,
        description="The tenant's budgets, with what their period spent and reserved so far.",
    )
    agent_states: list[AgentState] = strawberry.field(
        resolver=budget_fields.agent_states, description="Each agent's pause in this tenant."
    )
    members: list[Member] = strawberry.field(
        resolver=member_fields.list_members, description="The tenant's members, oldest first."
    )
    usage: list[UsageDay] = strawberry.field(
        resolver=usage_fields.usage, description="Runs per UTC day, agent and status."
    )
    usage_tokens: list[UsageTokensDay] = strawberry.field(
        resolver=usage_fields.usage_tokens,
        description="Model tokens and cost per UTC day (when the steps completed) and agent.",
    )
    agent_stats: list[AgentStats] = strawberry.field(
        resolver=usage_fields.agent_stats,
        description="Per agent with runs created in the last `hours` (1 to 744): counts by "
        "outcome and the median duration of the succeeded ones.",
    )
    run_replay: RunReplay | None = strawberry.field(resolver=replay_fields.run_replay)
    replay_runs_count: int = strawberry.field(
        resolver=replay_fields.replay_runs_count,
        description="How many runs replayRuns with this filter and limit would take now (at "
        "most `limit`), checked as replayRuns checks them: the count to show before asking.",
    )
    cancel_runs_count: int = strawberry.field(
        resolver=bulk_cancel_fields.cancel_runs_count,
        description="How many active runs cancelRuns with this filter and limit would take now "
        "(at most `limit`), checked as cancelRuns checks them: the count to show before asking.",
    )
    run_replays: list[RunReplay] = strawberry.field(
        resolver=replay_fields.run_replays,
        description="Newest first: replays and bulk cancels (`kind`).",
    )
    schedules: list[Schedule] = strawberry.field(
        resolver=schedule_fields.list_schedules,
        description="The tenant's schedules, oldest first; `after`: the last id of a page.",
    )
    schedule: Schedule | None = strawberry.field(resolver=schedule_fields.schedule)


@strawberry.type
class Mutation:
    start_run: StartRunPayload = strawberry.mutation(resolver=run_fields.start_run)
    cancel_run: Run = strawberry.mutation(
        resolver=run_fields.cancel_run,
        description="Idempotent; a settled run comes back unchanged.",
    )
    create_webhook_endpoint: CreateWebhookEndpointPayload = strawberry.mutation(
        resolver=webhook_fields.create_webhook_endpoint
    )
    delete_webhook_endpoint: bool = strawberry.mutation(
        resolver=webhook_fields.delete_webhook_endpoint
    )
    invite_member: Invitation = strawberry.mutation(resolver=invitation_fields.invite_member)
    accept_invitation: AcceptInvitationPayload = strawberry.mutation(
        resolver=invitation_fields.accept_invitation,
        description="No bearer token: the emailed code is the credential (single use, expiring "
        "with the invitation). A refused code answers BAD_USER_INPUT with extensions.reason.",
    )
    revoke_invitation: Invitation = strawberry.mutation(
        resolver=invitation_fields.revoke_invitation,
        description="Its code stops working; an accepted invitation cannot be revoked.",
    )
    resend_invitation: Invitation = strawberry.mutation(
        resolver=invitation_fields.resend_invitation,
        description="Sends it again with a new code and a new week (the old link stops working).",
    )
    retry_run: StartRunPayload = strawberry.mutation(
        resolver=replay_fields.retry_run,
        description="A new run with the same agent and input (or `input`, validated as for "
        "startRun), linked by retriedFromId; when the agent has an active run, that run comes "
        "back with created: false. `reuseSteps`: the new run starts with a copy of the old run's "
        "recorded steps and resumes at the first one it did not finish (reused steps saw the old "
        "input).",
    )
    replay_runs: RunReplay = strawberry.mutation(
        resolver=replay_fields.replay_runs,
        description="Replays matching settled runs at most `rate` per second, at most "
        "`limit` of them, in the background; follow it with runReplay or replay.updated nudges.",
    )
    cancel_runs: RunReplay = strawberry.mutation(
        resolver=bulk_cancel_fields.cancel_runs,
        description="Cancels the active runs a filter selects (created before it), at most "
        "`rate` a second and `limit` in all, in the background, each as cancelRun does (its "
        "descendants too; the reason and who asked on its timeline). Progress as a replay's "
        "(kind CANCEL: runReplay, replay.updated nudges); cancelRunReplay stops it.",
    )
    cancel_run_replay: RunReplay = strawberry.mutation(
        resolver=replay_fields.cancel_run_replay,
        description="Stops a replay or a bulk cancel: the runs it has not reached are left "
        "alone. Idempotent.",
    )
    signal_run: SignalRunPayload = strawberry.mutation(
        resolver=run_fields.signal_run,
        description="Delivers a named signal to a run: kept in its mailbox until a wait for "
        "that name takes it (first in, first out); a run WAITING for it resumes.",
    )
    create_run_read_token: str = strawberry.mutation(
        resolver=run_fields.create_run_read_token,
        description="A bearer token that reads this one run (its events, steps and runOutput)"
        " and nothing else, for `ttlSeconds`, and dies with the token that made it.",
    )
    redeliver_webhook: WebhookDelivery = strawberry.mutation(
        resolver=webhook_fields.redeliver_webhook,
        description="Sends a delivered or failed delivery again (same webhook-id); a pending "
        "one comes back unchanged.",
    )
    retry_webhook_delivery: WebhookDelivery = strawberry.mutation(
        resolver=webhook_fields.retry_webhook_delivery,
        description="A PENDING delivery waiting for the retry of a failed attempt is tried now "
        "(its nextAttemptAt becomes now); any other comes back unchanged.",
    )
    send_test_webhook: WebhookDelivery = strawberry.mutation(
        resolver=webhook_fields.send_test_webhook,
        description='A `webhook.test` event to the endpoint (data: {"endpointId": …}), whatever '
        "events it asked for: a delivery like the others, signed, retried and shown.",
    )
    redeliver_failed_webhooks: RedeliverFailedWebhooksPayload = strawberry.mutation(
        resolver=webhook_fields.redeliver_failed_webhooks,
        description="Sends every FAILED delivery of the endpoint again (the newest 100), as "
        "redeliverWebhook does each; the payload says how many.",
    )
    retry_pending_webhook_deliveries: RetryPendingWebhookDeliveriesPayload = strawberry.mutation(
        resolver=webhook_fields.retry_pending_webhook_deliveries,
        description="Each PENDING delivery of the endpoint waiting for the retry of a "
        "failed attempt (the newest 100) is tried now, as retryWebhookDelivery does one; "
        "the payload says how many.",
    )
    set_member_role: Member = strawberry.mutation(
        resolver=member_fields.set_member_role,
        description="ADMIN. Their tokens act with the new role from their next request; the "
        "last ADMIN cannot be demoted.",
    )
    remove_member: bool = strawberry.mutation(
        resolver=member_fields.remove_member,
        description="ADMIN. Their tokens stop working and their sockets close within a second; "
        "the last ADMIN cannot be removed.",
    )
    set_budget: Budget = strawberry.mutation(
        resolver=budget_fields.set_budget,
        description="ADMIN. One per (scope, target, period): setting it again updates it; "
        "runs it holds resume when it has room again.",
    )
    delete_budget: bool = strawberry.mutation(
        resolver=budget_fields.delete_budget, description="ADMIN. Runs it held resume."
    )
    pause_run: Run = strawberry.mutation(
        resolver=budget_fields.pause_run,
        description="Holds the run: QUEUED or WAITING at once, RUNNING at its next step. "
        "Idempotent; a settled run comes back unchanged.",
    )
    resume_run: Run = strawberry.mutation(
        resolver=budget_fields.resume_run,
        description="Lets a held run go on (whoever paused it); overBudget: a run a budget "
        "holds may finish past it.",
    )
    pause_agent: AgentState = strawberry.mutation(
        resolver=budget_fields.pause_agent,
        description="Holds every run of the agent in this tenant, and new ones.",
    )
    resume_agent: AgentState = strawberry.mutation(
        resolver=budget_fields.resume_agent,
        description="Lets go of the runs the agent's pause held.",
    )
    create_schedule: Schedule = strawberry.mutation(resolver=schedule_fields.create_schedule)
    update_schedule: Schedule = strawberry.mutation(
        resolver=schedule_fields.update_schedule,
        description="Its clock goes on from now; a paused schedule stays paused.",
    )
    delete_schedule: bool = strawberry.mutation(
        resolver=schedule_fields.delete_schedule, description="Its runs stay."
    )
    pause_schedule: Schedule = strawberry.mutation(resolver=schedule_fields.pause_schedule)
    resume_schedule: Schedule = strawberry.mutation(
        resolver=schedule_fields.resume_schedule,
        description="Missed occurrences are skipped, never caught up.",
    )
    trigger_schedule: StartRunPayload = strawberry.mutation(
        resolver=schedule_fields.trigger_schedule,
        description="One run now, under the schedule's key and overlap policy.",
    )
    backfill_schedule: int = strawberry.mutation(
        resolver=schedule_fields.backfill_schedule,
        description="The occurrences in [from, to) (up to now) get a run each, once, queued in "
        "the key's line: a repeat makes none. At most 1,000.",
    )
    set_retention: Tenant = strawberry.mutation(
        resolver=governance_fields.set_retention,
        description="ADMIN. The tenant's settled runs are kept `days` days (1 to 3650), then "
        "deleted; usage totals are kept.",
    )
    erase_subject: ErasureReceipt = strawberry.mutation(
        resolver=governance_fields.erase_subject,
        description="ADMIN. Cancels the runs carrying `tag` that are active, then deletes every "
        "run carrying it with its input, output, steps, events, signals, stream chunks and "
        "webhook deliveries; usage totals are kept. Recorded (who, when, tag, counts).",
    )


@strawberry.type
class Subscription:
    nudges: Nudge = strawberry.subscription(  # type: ignore[assignment]  # typed by its resolver
        resolver=nudge_fields.nudges,
        description="The tenant of the connection's token; nothing else.",
    )
    run_output: OutputChunk = strawberry.subscription(  # type: ignore[assignment]  # its resolver
        resolver=output_fields.run_output,
        description="Partial output of one run: everything still kept after `after` (null: from"
        " the start), then live chunks; completes when the run settles.",
    )


class OutliveSchema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Errors are coded and, when unexpected, logged by `ErrorCodes`; no second log."""


def build_schema(
    *, extensions: Sequence[Any] = (), execution_context_class: Any = None
) -> strawberry.Schema:
    """The schema of the root types, with `extensions` (strawberry's: classes or factories) and
    the graphql-core executor strawberry executes with (None: strawberry's)."""
    return OutliveSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=list(extensions),
        execution_context_class=execution_context_class,
    )
