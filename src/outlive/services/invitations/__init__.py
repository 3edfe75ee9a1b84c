"""Invitations: `inviteMember` writes a PENDING row and queues `email.invitation.v1`.

The job sends the email (SMTP, or the log when `OUTLIVE_SMTP_URL` is unset) and marks the row
SENT; a failure is retried with the jobs-queue backoff and, after the last attempt, the row is
FAILED. The email carries a link with a one-time token of which only a hash is stored. Every
change nudges `invitation.updated`.

Each invitation carries the role its invitee gets (`inviteMember(role:)`, OPERATOR by default).
One link per address works at a time: a new invitation to an address voids (REVOKED) the older
ones not yet accepted, and an accepted one voids the others, so an older link can never mint a
second token. An address that is a member already is refused. There is at most one PENDING
invitation per (tenant, email), a partial unique index: inviting an address again with the same
role while its invitation is still unsent hands that invitation back, with no second email.
`lastError` is generic ("mail server answered 550"): the SMTP server's own text can carry
internal host names and is for the log only.
"""

from outlive.services.invitations.codes import (
    Accepted,
    CodeCheck,
    InvitationRefused,
    check_code,
    record_acceptance,
    take_code,
)
from outlive.services.invitations.lifecycle import (
    compose,
    expire_batch,
    finish,
    invite,
    list_invitations,
    record_attempt,
    record_unavailable,
    resend,
    revoke,
    take_pending,
)
from outlive.services.invitations.records import InvitationRecord, Outgoing, read_invitation

__all__ = [
    "Accepted",
    "CodeCheck",
    "InvitationRecord",
    "InvitationRefused",
    "Outgoing",
    "check_code",
    "compose",
    "expire_batch",
    "finish",
    "invite",
    "list_invitations",
    "read_invitation",
    "record_acceptance",
    "record_attempt",
    "record_unavailable",
    "resend",
    "revoke",
    "take_code",
    "take_pending",
]
