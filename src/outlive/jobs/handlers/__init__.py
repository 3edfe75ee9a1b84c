"""One handler file per envelope type. A handler is idempotent (a redelivery finds its row
already settled and returns); raising means "retry me"; a permanent failure is recorded on the
row and the handler returns normally. `give_up` settles the row when the retries run out."""

from __future__ import annotations

from outlive.jobs.deps import Handler
from outlive.jobs.handlers import email_invitation_v1, run_replay_v1, webhook_deliver_v1

__all__ = ["HANDLERS", "Handler"]

HANDLERS: dict[str, Handler] = {
    "webhook.deliver.v1": Handler(
        webhook_deliver_v1.handle, webhook_deliver_v1.give_up, webhook_deliver_v1.retrying
    ),
    "email.invitation.v1": Handler(email_invitation_v1.handle, email_invitation_v1.give_up),
    "run.replay.v1": Handler(run_replay_v1.handle, run_replay_v1.give_up),
}
