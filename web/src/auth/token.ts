/**
 * The API token: kept in localStorage under one key that GraphiQL (graphiql.html) reads too.
 *
 * `outlive dev` prints a link `http://127.0.0.1:8000/#token=<token>`: the fragment never reaches
 * the server or its logs; the app stores the token and removes the fragment from the address bar.
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

export function setToken(token: string | null): void {
  const clean = token?.trim() || null;
  memoryToken = clean;
  const store = storage();
  if (clean) store?.setItem(TOKEN_KEY, clean);
  else store?.removeItem(TOKEN_KEY);
  for (const listener of listeners) listener(clean);
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

/** Signs in from `#token=…` and strips the fragment (keeping path and query). */
export function adoptTokenFromLocation(): void {
  const token = tokenFromHash(window.location.hash);
  if (token === null) return;
  setToken(token);
  const { pathname, search } = window.location;
  window.history.replaceState(window.history.state, "", pathname + search);
}

/** Keeps tabs in step: signing out in one tab signs out the others. */
export function watchOtherTabs(): () => void {
  const onStorage = (event: StorageEvent) => {
    if (event.key === TOKEN_KEY) for (const l of listeners) l(event.newValue);
  };
  window.addEventListener("storage", onStorage);
  return () => window.removeEventListener("storage", onStorage);
}
