"""Table models, one module per noun. Importing this package registers every table."""

from outlive.db.models.base import Base
from outlive.db.models.invitations import Invitation, InvitationStatus
from outlive.db.models.jobs import RejectedJob
from outlive.db.models.liveness import LivenessLock
from outlive.db.models.replays import ReplayStatus, RunReplay
from outlive.db.models.runs import (
    ACTIVE_SQL,
    ACTIVE_STATUSES,
    HEAD_SQL,
    WAITING_SQL,
    Run,
    RunConflict,
    RunEvent,
    RunSignal,
    RunStatus,
    RunStep,
    RunWait,
)
from outlive.db.models.tenants import ApiToken, Tenant, User
from outlive.db.models.usage import UsageDaily, UsageRollup
from outlive.db.models.webhooks import (
    DeliveryStatus,
    WebhookDelivery,
    WebhookDeliveryAttempt,
    WebhookEndpoint,
)

__all__ = [
    "ACTIVE_SQL",
    "ACTIVE_STATUSES",
    "HEAD_SQL",
    "WAITING_SQL",
    "ApiToken",
    "Base",
    "DeliveryStatus",
    "Invitation",
    "InvitationStatus",
    "LivenessLock",
    "RejectedJob",
    "ReplayStatus",
    "Run",
    "RunConflict",
    "RunEvent",
    "RunReplay",
    "RunSignal",
    "RunStatus",
    "RunStep",
    "RunWait",
    "Tenant",
    "UsageDaily",
    "UsageRollup",
    "User",
    "WebhookDelivery",
    "WebhookDeliveryAttempt",
    "WebhookEndpoint",
]
