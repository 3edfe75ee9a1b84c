import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import { INVITATIONS, INVITE_MEMBER } from "../api/documents/invitations";
import { describeError, isUnavailable } from "../api/errors";
import { ErrorNote, Loading, StatusBadge } from "../ui/common";
import { formatTime } from "../ui/format";

/** Invite a member by email; the list follows each invitation's email (invitation.updated). */
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
        <table className="table" aria-label="Invitations">
          <thead>
            <tr>
              <th scope="col">Email</th>
              <th scope="col">Status</th>
              <th scope="col">Created</th>
              <th scope="col">Sent</th>
            </tr>
          </thead>
          <tbody>
            {invitations.map((i) => (
              <tr key={i.id}>
                <td>{i.email}</td>
                <td>
                  <StatusBadge status={i.status} />
                </td>
                <td>{formatTime(i.createdAt)}</td>
                <td>{formatTime(i.sentAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
