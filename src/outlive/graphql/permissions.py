"""Who may run an operation over HTTP, decided before anything executes.

- a run read token reads its one run and changes nothing: any mutation is refused (401);
- a mutation whose top-level fields (fragments included) need a role above the token's
  (`resolvers.roles`, the one table) is refused whole with `FORBIDDEN`: nothing ran, so
  nothing changed, even for the fields the role would allow.

Requests without a token are decided before this (`anonymous.py`); queries and subscriptions
need no role.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphql import OperationType

from outlive.graphql.documents import Operation
from outlive.resolvers.roles import needed
from outlive.services.tenants import Principal


@dataclass(frozen=True, slots=True)
class Denied:
    status: int
    message: str
    code: str


def denied(operation: Operation, principal: Principal | None) -> Denied | None:
    """Why `principal` may not run `operation` (None: it may)."""
    if principal is None or operation.type is not OperationType.MUTATION:
        return None
    if principal.is_run_reader:
        return Denied(401, "a run read token changes nothing", "UNAUTHENTICATED")
    above = sorted(f for f in operation.root_fields if not principal.role.allows(needed(f)))
    if not above:
        return None
    names = ", ".join(f"{f} ({needed(f).value})" for f in above)
    return Denied(200, f"this token is {principal.role.value}: {names} needs more", "FORBIDDEN")
