/**
 * The API token: kept in localStorage under one key that GraphiQL (graphiql.html) reads too.
 *
 * `outlive dev` prints a link `http://127.0.0.1:8000/#token=<token>`: the fragment never reaches
 * the server or its logs; the app removes it from the address bar. With nobody signed in, the
 * link signs in. With someone signed in under another token, the link does not switch by itself
 * (a crafted link could otherwise sign a user into someone else's tenant): it becomes a pending
 * switch that the user confirms or declines (`SwitchTenant`).
 */

export const TOKEN_KEY = "outlive.token";

type Listener = (token: string | null) => void;
const listeners = new Set<Listener>();

function storage(): Storage | null {
  try {
    return window.localStorage;
  } catch {
    return null; // storage disabled: the token lives only as long as the page
  }
}

let memoryToken: string | null = null;

export function getToken(): string | null {
  return storage()?.getItem(TOKEN_KEY) ?? memoryToken;
}

export const ACCEPTED_KEY = "outlive.token.accepted";
let memoryAccepted = false;

export function setToken(token: string | null): void {
  const clean = token?.trim() || null;
  const store = storage();
  if (clean !== getToken()) {
    // A new token has not been accepted yet: until the API answers with it, a refusal is "did
    // not accept", never "no longer accepts".
    memoryAccepted = false;
    store?.removeItem(ACCEPTED_KEY);
  }
  memoryToken = clean;
  if (clean) store?.setItem(TOKEN_KEY, clean);
  else store?.removeItem(TOKEN_KEY);
  for (const listener of listeners) listener(clean);
}

/** The API answered with the current token at least once (the app's Viewer query). */
export function markTokenAccepted(): void {
  memoryAccepted = true;
  storage()?.setItem(ACCEPTED_KEY, "1");
}

export function wasTokenAccepted(): boolean {
  return memoryAccepted || storage()?.getItem(ACCEPTED_KEY) === "1";
}

/** What to say when the API refuses the token: it once worked, or it never did. */
export function refusalMessage(): string {
  return wasTokenAccepted()
    ? "The API no longer accepts that token. Sign in again."
    : "The API did not accept that token. Check it and sign in again.";
}

let reason: string | null = null;

/** Signs out because the API refused the token; the sign-in screen says why. */
export function signOut(why: string | null = null): void {
  reason = why;
  setToken(null);
}

/** Why the last sign-out happened (once), or null. */
export function takeSignOutReason(): string | null {
  const why = reason;
  reason = null;
  return why;
}

export function onTokenChange(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** The token in a `#token=…` fragment, if any. */
export function tokenFromHash(hash: string): string | null {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const token = params.get("token")?.trim();
  return token ? token : null;
}

export type LinkDecision =
  | { action: "none" }
  | { action: "adopt"; token: string }
  | { action: "ask"; token: string };

/** What a `#token=…` link may do, given the token already kept (if any). */
export function decideLink(hash: string, current: string | null): LinkDecision {
  const token = tokenFromHash(hash);
  if (token === null || token === current) return { action: "none" };
  return current === null ? { action: "adopt", token } : { action: "ask", token };
}

let pending: string | null = null;
const pendingListeners = new Set<() => void>();

/** The token a link asked to switch to, until the user answers. */
export function getPendingSwitch(): string | null {
  return pending;
}

export function onPendingSwitch(listener: () => void): () => void {
  pendingListeners.add(listener);
  return () => pendingListeners.delete(listener);
}

function setPending(token: string | null): void {
  pending = token;
  for (const listener of pendingListeners) listener();
}

/** The user's answer: switch to the link's token, or stay signed in as before. */
export function answerPendingSwitch(accept: boolean): void {
  const token = pending;
  setPending(null);
  if (accept && token) setToken(token);
}

/** Acts on a `#token=…` link (sign in, or ask first) and strips the fragment (keeping path and
 * query), so the token never lingers in the address bar or the history. */
export function adoptTokenFromLocation(): void {
  const decision = decideLink(window.location.hash, getToken());
  if (tokenFromHash(window.location.hash) === null) return;
  const { pathname, search } = window.location;
  window.history.replaceState(window.history.state, "", pathname + search);
  if (decision.action === "adopt") setToken(decision.token);
  else if (decision.action === "ask") setPending(decision.token);
}

/** Keeps tabs in step: signing out in one tab signs out the others. */
export function watchOtherTabs(): () => void {
  const onStorage = (event: StorageEvent) => {
    if (event.key === TOKEN_KEY) for (const l of listeners) l(event.newValue);
  };
  window.addEventListener("storage", onStorage);
  return () => window.removeEventListener("storage", onStorage);
}
