/**
 * An invitation link: `/#invitation=<code>&tenant=<name>&email=<address>`, from the invitation
 * email. Like a `#token=` link, the fragment never reaches the server and is stripped from the
 * address bar at once; the invitation is kept in memory until it is accepted or set aside. The
 * tenant's name and the address are only what the link says: the code alone decides what
 * accepting does, and the API's answer names the real tenant.
 */

export interface InvitationLink {
  code: string;
  tenant: string | null;
  email: string | null;
}

/** The invitation in a fragment, if any. */
export function invitationFromHash(hash: string): InvitationLink | null {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const code = params.get("invitation")?.trim();
  if (!code) return null;
  return { code, tenant: params.get("tenant")?.trim() || null, email: params.get("email")?.trim() || null };
}

let pending: InvitationLink | null = null;
const listeners = new Set<() => void>();

export function getInvitation(): InvitationLink | null {
  return pending;
}

export function onInvitation(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export function setInvitation(link: InvitationLink | null): void {
  pending = link;
  for (const l of listeners) l();
}

/** Keeps the invitation of a `#invitation=…` link and strips the fragment (path and query stay). */
export function adoptInvitationFromLocation(): void {
  const link = invitationFromHash(window.location.hash);
  if (link === null) return;
  const { pathname, search } = window.location;
  window.history.replaceState(window.history.state, "", pathname + search);
  setInvitation(link);
}

export type AcceptAnswer =
  | { ok: true; token: string; tenant: { slug: string; name: string }; email: string }
  | { ok: false; reason: string; message: string };

const ACCEPT = `mutation AcceptInvitation($code: String!) {
  acceptInvitation(code: $code) { token viewer { user { email } tenant { slug name } } }
}`;

/** Why a code was refused, in words, by the API's `extensions.reason`. */
export const REFUSAL_HEADINGS: Record<string, string> = {
  expired: "This invitation has expired",
  revoked: "This invitation was revoked",
  accepted: "This invitation was already used",
  unknown: "This invitation link is not valid",
  unsent: "This invitation is not ready yet",
  member: "You are a member already",
};

export type CodeCheck =
  | { valid: true; tenantName: string; email: string; role: string }
  | { valid: false; reason: string; message: string };

const CHECK = `query InvitationCode($code: String!) {
  invitationCode(code: $code) { valid reason message tenantName email role }
}`;

/**
 * What accepting the code would do now, asked when the page opens (no bearer token, nothing is
 * changed): a revoked, used or expired link says so before anyone clicks. A network or server
 * failure reads as valid, so the page still offers Accept (whose answer is the last word).
 */
export async function checkInvitation(code: string, fetcher: typeof fetch = fetch): Promise<CodeCheck | null> {
  try {
    const response = await fetcher("/graphql", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ query: CHECK, variables: { code }, operationName: "InvitationCode" }),
    });
    const body = (await response.json()) as {
      data?: { invitationCode?: { valid: boolean; reason: string | null; message: string | null; tenantName: string | null; email: string | null; role: string | null } } | null;
    };
    const found = body.data?.invitationCode;
    if (!found) return null;
    if (found.valid) return { valid: true, tenantName: found.tenantName ?? "", email: found.email ?? "", role: found.role ?? "" };
    return { valid: false, reason: found.reason ?? "unknown", message: found.message ?? "" };
  } catch {
    return null;
  }
}

/** `acceptInvitation` with no bearer token (the code is the credential): a plain POST. */
export async function acceptInvitation(code: string, fetcher: typeof fetch = fetch): Promise<AcceptAnswer> {
  let response: Response;
  try {
    response = await fetcher("/graphql", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ query: ACCEPT, variables: { code }, operationName: "AcceptInvitation" }),
    });
  } catch {
    return { ok: false, reason: "network", message: "Cannot reach the API (is it running?). Try again." };
  }
  let body: {
    data?: { acceptInvitation?: { token: string; viewer: { user: { email: string }; tenant: { slug: string; name: string } } } } | null;
    errors?: { message: string; extensions?: { code?: string; reason?: string } }[];
  };
  try {
    body = await response.json();
  } catch {
    return { ok: false, reason: "server", message: `The API answered HTTP ${response.status}.` };
  }
  const accepted = body.data?.acceptInvitation;
  if (accepted) {
    return { ok: true, token: accepted.token, tenant: accepted.viewer.tenant, email: accepted.viewer.user.email };
  }
  const error = body.errors?.[0];
  const reason = error?.extensions?.reason ?? error?.extensions?.code ?? "server";
  return { ok: false, reason, message: error?.message ?? `The API answered HTTP ${response.status}.` };
}
