import { useMutation, useQuery } from "@apollo/client/react";
import { useEffect } from "react";
import { type Member, MEMBERS, REMOVE_MEMBER, type Role, SET_MEMBER_ROLE } from "../api/documents/members";
import { describeError, isUnavailable } from "../api/errors";
import { Link } from "../app/router";
import { ErrorNote, Loading, When } from "../ui/common";
import { Confirmed } from "../ui/Confirmed";

export const ROLES: readonly { value: Role; label: string }[] = [
  { value: "ADMIN", label: "Admin" },
  { value: "OPERATOR", label: "Operator" },
  { value: "VIEWER", label: "Viewer" },
];

/**
 * Who is in the tenant: each member's role (an ADMIN changes it in place), their live API tokens,
 * when they joined, and Remove (asks first; their tokens stop working). Follows member.updated.
 * The server refuses to demote or remove the last ADMIN; that refusal is shown in the row.
 */
export function Members() {
  const { data, error, loading } = useQuery(MEMBERS);
  useEffect(() => {
    document.title = "Members · Outlive";
  }, []);
  if (error && isUnavailable(error)) {
    return (
      <section aria-labelledby="members-heading">
        <h1 id="members-heading">Members</h1>
        <ErrorNote error={error} what="members" />
      </section>
    );
  }
  const members = data?.members ?? [];
  const admin = data?.viewer.role === "ADMIN";
  const me = data?.viewer.user.id;
  return (
    <section aria-labelledby="members-heading">
      <div className="section-head">
        <h1 id="members-heading">Members</h1>
        <Link to="/invitations" className="button">
          Invite a member
        </Link>
      </div>
      <p className="muted">
        Viewers read; operators also act on runs and schedules; admins also manage members, invitations, webhooks and
        budgets. A new role applies from each token's next request.
        {!admin && data && " Only an admin changes roles or removes members."}
      </p>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {members.length > 0 && (
        <table className="table cards-narrow" aria-label="Members">
          <thead>
            <tr>
              <th scope="col">Member</th>
              <th scope="col">Role</th>
              <th scope="col">Live tokens</th>
              <th scope="col">Joined</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {members.map((m) => (
              <MemberRow key={m.userId} member={m} admin={admin} me={m.userId === me} />
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function MemberRow({ member: m, admin, me }: { member: Member; admin: boolean; me: boolean }) {
  const [setRole, settingRole] = useMutation(SET_MEMBER_ROLE, { refetchQueries: ["Members"] });
  const [remove, removing] = useMutation(REMOVE_MEMBER, { refetchQueries: ["Members"] });
  const error = settingRole.error ?? removing.error;
  const roleId = `role-${m.userId}`;
  return (
    <tr data-email={m.email}>
      <td data-label="Member">
        {m.email}
        {me && <span className="muted small"> (you)</span>}
      </td>
      <td data-label="Role">
        {admin ? (
          <>
            <label htmlFor={roleId} className="visually-hidden">
              Role of {m.email}
            </label>
            <select
              id={roleId}
              value={m.role}
              aria-disabled={settingRole.loading ? true : undefined}
              onChange={(e) => void setRole({ variables: { userId: m.userId, role: e.target.value as Role } }).catch(() => undefined)}
            >
              {ROLES.map((r) => (
                <option key={r.value} value={r.value}>
                  {r.label}
                </option>
              ))}
            </select>
          </>
        ) : (
          ROLES.find((r) => r.value === m.role)?.label ?? m.role
        )}
      </td>
      <td data-label="Live tokens" data-testid="member-tokens">
        {m.tokens}
      </td>
      <td data-label="Joined">
        <When iso={m.joinedAt} />
      </td>
      <td data-label="Actions">
        {admin && (
          <Confirmed
            ask="Remove…"
            askLabel={`Remove ${m.email}`}
            question={`Remove ${m.email}?`}
            warning={`Remove ${me ? "yourself" : "them"}? Their ${m.tokens} token(s) stop working.`}
            yes="Yes, remove"
            no="Keep"
            busy={removing.loading}
            onYes={() => {
              if (!removing.loading) void remove({ variables: { userId: m.userId } }).catch(() => undefined);
            }}
          />
        )}
        {error && (
          <p className="note note-error small" role="alert">
            {describeError(error)}
          </p>
        )}
      </td>
    </tr>
  );
}
