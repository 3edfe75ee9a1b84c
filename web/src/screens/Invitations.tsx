import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import { INVITATIONS, INVITE_MEMBER, RESEND_INVITATION, REVOKE_INVITATION } from "../api/documents/invitations";
import type { InvitationFieldsFragment } from "../api/generated";
import { describeError, isUnavailable } from "../api/errors";
import { ErrorNote, Loading, StatusBadge } from "../ui/common";
import { formatTime } from "../ui/format";

/**
 * Invite a member by email; one row per address (its newest invitation), with Resend and Revoke.
 * The list follows each invitation's email (invitation.updated).
 */
export function Invitations() {
  const { data, error, loading } = useQuery(INVITATIONS);
  const [email, setEmail] = useState("");
  const [invite, invited] = useMutation(INVITE_MEMBER, { refetchQueries: ["Invitations"] });
  useEffect(() => {
    document.title = "Invitations · Outlive";
  }, []);

  if (error && isUnavailable(error)) {
    return (
      <section aria-labelledby="invitations-heading">
        <h1 id="invitations-heading">Invitations</h1>
        <ErrorNote error={error} what="invitations" />
      </section>
    );
  }
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    try {
      await invite({ variables: { email: email.trim() } });
      setEmail("");
    } catch {
      // shown below
    }
  };
  const invitations = data?.invitations ?? [];
  return (
    <section aria-labelledby="invitations-heading">
      <h1 id="invitations-heading">Invitations</h1>
      <form className="card inline-form" onSubmit={submit} aria-label="Invite a member">
        <div className="field">
          <label htmlFor="invite-email">Email</label>
          <input
            id="invite-email"
            type="email"
            required
            autoComplete="off"
            placeholder="teammate@example.com"
            value={email}
            onChange={(e) => setEmail(e.target.value)}
          />
        </div>
        <button type="submit" className="primary" disabled={invited.loading || !email.trim()}>
          Send invitation
        </button>
      </form>
      {invited.error && (
        <p className="note note-error" role="alert">
          {describeError(invited.error)}
        </p>
      )}
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && invitations.length === 0 && <p className="empty">No invitations yet.</p>}
      {invitations.length > 0 && (
        <table className="table cards-narrow" aria-label="Invitations">
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">Status</th>
              <th scope="col">Sent</th>
              <th scope="col">Works until</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {latestPerAddress(invitations).map(({ invitation: i, earlier }) => (
              <InvitationRow key={i.id} invitation={i} earlier={earlier} />
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

type Invitation = InvitationFieldsFragment;

/** The newest invitation of each address (the list comes newest first), with how many are older. */
export function latestPerAddress(invitations: readonly Invitation[]): { invitation: Invitation; earlier: number }[] {
  const rows = new Map<string, { invitation: Invitation; earlier: number }>();
  for (const invitation of invitations) {
    const row = rows.get(invitation.email);
    if (row) row.earlier += 1;
    else rows.set(invitation.email, { invitation, earlier: 0 });
  }
  return [...rows.values()];
}

const RESENDABLE = new Set(["SENT", "FAILED", "EXPIRED", "REVOKED"]);
const REVOCABLE = new Set(["PENDING", "SENT", "FAILED", "EXPIRED"]);

/** One address: its status, and Resend / Revoke (Revoke asks first); answers stay in the row. */
function InvitationRow({ invitation: i, earlier }: { invitation: Invitation; earlier: number }) {
  const [resend, resending] = useMutation(RESEND_INVITATION, { refetchQueries: ["Invitations"] });
  const [revoke, revoking] = useMutation(REVOKE_INVITATION, { refetchQueries: ["Invitations"] });
  const [confirming, setConfirming] = useState(false);
  const error = resending.error ?? revoking.error;
  const settled = i.status === "ACCEPTED" || i.status === "REVOKED" || i.status === "EXPIRED";
  return (
    <tr data-email={i.email}>
      <td data-label="Email">
        {i.email}
        {earlier > 0 && <span className="muted small"> ({earlier} earlier)</span>}
      </td>
      <td data-label="Status">
        <StatusBadge status={i.status} />
        {i.lastError && i.status !== "ACCEPTED" && <span className="muted small"> {i.lastError}</span>}
      </td>
      <td data-label="Sent">{i.status === "ACCEPTED" ? `accepted ${formatTime(i.acceptedAt)}` : formatTime(i.sentAt)}</td>
      <td data-label="Works until">{settled ? "—" : formatTime(i.expiresAt)}</td>
      <td>
        <div className="actions">
          {RESENDABLE.has(i.status) && !confirming && (
            <button
              type="button"
              disabled={resending.loading}
              onClick={() => void resend({ variables: { id: i.id } }).catch(() => undefined)}
              aria-label={`Resend the invitation to ${i.email}`}
            >
              Resend
            </button>
          )}
          {REVOCABLE.has(i.status) &&
            (confirming ? (
              <span role="group" aria-label={`Revoke the invitation to ${i.email}?`} className="confirm">
                <span className="small">Revoke? Its link stops working.</span>{" "}
                <button
                  type="button"
                  className="danger"
                  disabled={revoking.loading}
                  autoFocus
                  onClick={() =>
                    void revoke({ variables: { id: i.id } })
                      .then(() => setConfirming(false))
                      .catch(() => undefined)
                  }
                >
                  Yes, revoke
                </button>{" "}
                <button type="button" className="quiet" onClick={() => setConfirming(false)}>
                  Keep it
                </button>
              </span>
            ) : (
              <button type="button" className="quiet" onClick={() => setConfirming(true)} aria-label={`Revoke the invitation to ${i.email}`}>
                Revoke
              </button>
            ))}
        </div>
        {error && (
          <p className="field-error" role="alert">
            {describeError(error)}
          </p>
        )}
      </td>
    </tr>
  );
}
