"""Table models, one module per noun. Importing this package registers every table."""

from outlive.db.models.base import Base
from outlive.db.models.runs import ACTIVE_STATUSES, Run, RunEvent, RunStatus
from outlive.db.models.tenants import ApiToken, Tenant, User

__all__ = ["ACTIVE_STATUSES", "ApiToken", "Base", "Run", "RunEvent", "RunStatus", "Tenant", "User"]
