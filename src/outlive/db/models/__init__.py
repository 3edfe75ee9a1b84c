"""Table models, one module per noun. Importing this package registers every table.

The model modules do without `from __future__ import annotations`: SQLAlchemy then reads each
`Mapped[...]` as the object it is instead of parsing and evaluating its text, about a quarter of
the models' import time (every process imports them; a worker's start is mostly imports). A
model that names its own class in an annotation quotes it (`Role` in `tenants`).
"""

from outlive.db.models.base import Base
from outlive.db.models.budgets import (
    Budget,
    BudgetBreach,
    BudgetPeriod,
    BudgetPeriodUsage,
    BudgetReservation,
    BudgetScope,
)
from outlive.db.models.governance import (
    Blob,
    BlobPart,
    BlobRef,
    Erasure,
    UsageKeptRuns,
    UsageKeptTokens,
)
from outlive.db.models.invitations import Invitation, InvitationStatus
from outlive.db.models.jobs import RejectedJob
from outlive.db.models.liveness import LivenessLock
from outlive.db.models.replays import ReplayKind, ReplayStatus, RunReplay
from outlive.db.models.runs import (
    ACTIVE_SQL,
    ACTIVE_STATUSES,
    HEAD_SQL,
    WAITING_SQL,
    Run,
    RunCall,
    RunConflict,
    RunEvent,
    RunSignal,
    RunStatus,
    RunStep,
    RunWait,
)
from outlive.db.models.schedules import Schedule
from outlive.db.models.tenants import AgentPause, ApiToken, Role, Tenant, User
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
    "AgentPause",
    "ApiToken",
    "Base",
    "Blob",
    "BlobPart",
    "BlobRef",
    "Budget",
    "BudgetBreach",
    "BudgetPeriod",
    "BudgetPeriodUsage",
    "BudgetReservation",
    "BudgetScope",
    "DeliveryStatus",
    "Erasure",
    "Invitation",
    "InvitationStatus",
    "LivenessLock",
    "RejectedJob",
    "ReplayKind",
    "ReplayStatus",
    "Role",
    "Run",
    "RunCall",
    "RunConflict",
    "RunEvent",
    "RunReplay",
    "RunSignal",
    "RunStatus",
    "RunStep",
    "RunWait",
    "Schedule",
    "Tenant",
    "UsageDaily",
    "UsageKeptRuns",
    "UsageKeptTokens",
    "UsageRollup",
    "User",
    "WebhookDelivery",
    "WebhookDeliveryAttempt",
    "WebhookEndpoint",
]
