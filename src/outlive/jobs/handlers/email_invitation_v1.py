"""`email.invitation.v1`: send the invitation email; SENT, or retried, finally FAILED.

`lastError` is generic: the SMTP server's own words (host names, relay configuration) go to the
log, never to the tenant. The mail goes to the stored address, parsed again here (a row written
before the address check was strict can hold a `,`), and to it alone: the recipients are handed
to the mailer, never read back from the `To:` header.
"""

from __future__ import annotations

import aiosmtplib

from outlive.db.models import InvitationStatus
from outlive.errors import BadUserInput
from outlive.ids import InvitationId
from outlive.jobs.deps import JobDeps
from outlive.jobs.envelopes import SendInvitationV1
from outlive.services import invitations
from outlive.services.addresses import parse_address


async def handle(deps: JobDeps, payload: SendInvitationV1) -> None:
    invitation_id = InvitationId(payload.invitation_id)
    async with deps.sessions.unit() as uow:
        outgoing = await invitations.take_pending(uow, invitation_id)
    if outgoing is None:
        return  # already sent, failed or expired
    try:
        recipient = parse_address(outgoing.email)
    except BadUserInput:  # permanent: recorded, never sent, not retried
        async with deps.sessions.unit() as uow:
            await invitations.finish(
                uow, invitation_id, status=InvitationStatus.FAILED, error="invalid address"
            )
        return
    message = invitations.compose(
        outgoing, sender=deps.settings.smtp_from, public_url=deps.settings.public_url
    )
    try:
        await deps.mailer.send(message, recipients=[recipient])
    except Exception as exc:
        async with deps.sessions.unit() as uow:
            await invitations.record_attempt(uow, invitation_id, error=public_reason(exc))
        raise
    async with deps.sessions.unit() as uow:
        await invitations.finish(uow, invitation_id, status=InvitationStatus.SENT)


def public_reason(exc: BaseException) -> str:
    """What the tenant may read about a failed send."""
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"mail server answered {exc.code}"
    if isinstance(exc, aiosmtplib.SMTPConnectError | aiosmtplib.SMTPTimeoutError | OSError):
        return "mail server unreachable"
    return "the email could not be sent"


async def give_up(deps: JobDeps, payload: SendInvitationV1, error: str) -> None:
    """FAILED, keeping the last attempt's generic `lastError` (`error` is for the log)."""
    async with deps.sessions.unit() as uow:
        await invitations.finish(
            uow, InvitationId(payload.invitation_id), status=InvitationStatus.FAILED
        )
