"""The two fields served without a bearer token: `acceptInvitation` (contract §3) and
`invitationCode`, which the accept page asks when it opens.

An invited person has no token yet: the code their email carries is the credential, checked by
the resolver (single use, expiring with the invitation, limited per client address). So a `POST
/graphql` without an `Authorization` header is read, and served only when its operation selects
those fields and nothing else (`acceptInvitation` in a mutation, `invitationCode` in a query);
anything else answers 401 as before.
A request with a token that does not work is refused before its body is read (`app.py`). An
anonymous request cannot use a persisted query's hash (those are kept per tenant), and its
document text must name the field before it is parsed at all.
"""

from __future__ import annotations

from graphql import FieldNode, OperationType

from outlive.graphql.documents import Operation

ANONYMOUS = {
    OperationType.MUTATION: frozenset({"acceptInvitation"}),
    OperationType.QUERY: frozenset({"invitationCode"}),
}
ANONYMOUS_FIELDS = frozenset().union(*ANONYMOUS.values())
ANONYMOUS_OWNER = "anonymous"  # the owner of the documents anonymous requests send


def may_try(query: str | None) -> bool:
    """Worth parsing without a token: the text names an anonymous field."""
    return query is not None and any(name in query for name in ANONYMOUS_FIELDS)


def is_anonymous(operation: Operation) -> bool:
    """An operation whose every top-level selection is an anonymous field of its type (no
    fragment, no `__typename`: nothing that could read as anyone)."""
    allowed = ANONYMOUS.get(operation.type, frozenset())
    selections = operation.node.selection_set.selections
    return len(selections) > 0 and all(
        isinstance(s, FieldNode) and s.name.value in allowed for s in selections
    )
