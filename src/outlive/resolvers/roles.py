"""The role each mutation needs: the one table (contract §3 "roles").

`VIEWER` reads everything of its tenant and changes nothing; `OPERATOR` also starts, cancels,
retries, replays, signals, pauses and resumes runs and schedules; `ADMIN` also manages members,
invitations, webhooks, budgets and the tenant's data. The HTTP pipeline checks a mutation's
every top-level field against this table before anything runs (`graphql/permissions.py`): one
field above the token's role refuses the whole operation with `FORBIDDEN`, nothing changed.

A mutation missing here is refused to every role but ADMIN, and a test walks the served schema
so that CI fails until it is added (`tests/resolvers/test_roles.py`). Queries and the socket
need no role: every role reads.
"""

from __future__ import annotations

from types import MappingProxyType

from outlive.db.models import Role

ADMIN, OPERATOR, VIEWER = Role.ADMIN, Role.OPERATOR, Role.VIEWER

MUTATION_ROLES = MappingProxyType(
    {
        # anyone: the emailed code is the credential (it also works with no token at all)
        "acceptInvitation": VIEWER,
        # runs
        "startRun": OPERATOR,
        "cancelRun": OPERATOR,
        "retryRun": OPERATOR,
        "signalRun": OPERATOR,
        "replayRuns": OPERATOR,
        "cancelRunReplay": OPERATOR,
        "cancelRuns": OPERATOR,
        "createRunReadToken": OPERATOR,  # lets someone else read one run: a grant, not a read
        "pauseRun": OPERATOR,
        "resumeRun": OPERATOR,
        "pauseAgent": OPERATOR,
        "resumeAgent": OPERATOR,
        # schedules
        "createSchedule": OPERATOR,
        "updateSchedule": OPERATOR,
        "deleteSchedule": OPERATOR,
        "pauseSchedule": OPERATOR,
        "resumeSchedule": OPERATOR,
        "triggerSchedule": OPERATOR,
        "backfillSchedule": OPERATOR,
        # members and invitations
        "inviteMember": ADMIN,
        "revokeInvitation": ADMIN,
        "resendInvitation": ADMIN,
        "setMemberRole": ADMIN,
        "removeMember": ADMIN,
        # webhooks: where the tenant's events go, and what is sent again
        "createWebhookEndpoint": ADMIN,
        "deleteWebhookEndpoint": ADMIN,
        "sendTestWebhook": ADMIN,
        "redeliverWebhook": ADMIN,
        "retryWebhookDelivery": ADMIN,
        "retryPendingWebhookDeliveries": ADMIN,
        "redeliverFailedWebhooks": ADMIN,
        # spending and data
        "setBudget": ADMIN,
        "deleteBudget": ADMIN,
        "setRetention": ADMIN,
        "eraseSubject": ADMIN,
    }
)


def needed(field: str) -> Role:
    """The role a mutation field needs (ADMIN for one the table does not name)."""
    return MUTATION_ROLES.get(field, ADMIN)
