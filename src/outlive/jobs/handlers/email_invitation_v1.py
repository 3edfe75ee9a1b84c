"""`email.invitation.v1`: send the invitation email; SENT, or retried, finally FAILED."""

from __future__ import annotations

from typing import TYPE_CHECKING

from outlive.db.models import InvitationStatus
from outlive.ids import InvitationId
from outlive.jobs.envelopes import SendInvitationV1
from outlive.services import invitations

if TYPE_CHECKING:
    from outlive.jobs.consumer import JobDeps


async def handle(deps: JobDeps, payload: SendInvitationV1) -> None:
    invitation_id = InvitationId(payload.invitation_id)
    async with deps.sessions.unit() as uow:
        outgoing = await invitations.take_pending(uow, invitation_id)
    if outgoing is None:
        return  # already sent, failed or expired
    message = invitations.compose(
        outgoing, sender=deps.settings.smtp_from, public_url=deps.settings.public_url
    )
    try:
        await deps.mailer.send(message)
    except Exception as exc:
        async with deps.sessions.unit() as uow:
            await invitations.record_attempt(
                uow, invitation_id, error=f"{type(exc).__name__}: {exc}"
            )
        raise
    async with deps.sessions.unit() as uow:
        await invitations.finish(uow, invitation_id, status=InvitationStatus.SENT)


async def give_up(deps: JobDeps, payload: SendInvitationV1, error: str) -> None:
    async with deps.sessions.unit() as uow:
        await invitations.finish(
            uow, InvitationId(payload.invitation_id), status=InvitationStatus.FAILED, error=error
        )
