/**
 * The state of the nudge socket, as the connection indicator shows it, and which closes are worth
 * a reconnect. Pure: `socket.ts` feeds it the graphql-ws client's events and the browser's
 * online/offline events.
 */

export type ConnectionState =
  | "connecting" // the first attempt, before anything was ever live
  | "live" // acknowledged: nudges flow
  | "reconnecting" // lost (a redeploy, a network blip, the server down); retrying with backoff
  | "offline" // the browser has no network, or the client gave up
  | "unauthorized"; // the server refused the token (close 4403)

export type ConnectionEvent =
  | { type: "connecting" }
  | { type: "connected" }
  | { type: "closed"; code?: number }
  | { type: "browser-offline" }
  | { type: "browser-online" }
  | { type: "gave-up" };

/** Close code for a refused token (contract §3). */
export const CLOSE_FORBIDDEN = 4403;

export function nextState(state: ConnectionState, event: ConnectionEvent): ConnectionState {
  if (state === "unauthorized") return state; // only signing in again leaves this
  switch (event.type) {
    case "connecting":
      return state === "connecting" ? "connecting" : state === "offline" ? "offline" : "reconnecting";
    case "connected":
      return "live";
    case "closed":
      if (event.code === CLOSE_FORBIDDEN) return "unauthorized";
      return state === "offline" ? "offline" : "reconnecting";
    case "browser-offline":
      return "offline";
    case "browser-online":
      return state === "offline" ? "reconnecting" : state;
    case "gave-up":
      return "offline";
  }
}

/**
 * Whether a close (or a socket error) is worth another attempt. Everything is, but a refused
 * token: 1012 (service restart) and 1001 (going away) are what a redeploy looks like, 1006 is a
 * dropped network, 4499 is our own keep-alive giving up on a silent socket, and an `error` event
 * (a server that does not answer at all) carries no code.
 */
export function isReconnectable(errOrClose: unknown): boolean {
  const code = closeCode(errOrClose);
  return code !== CLOSE_FORBIDDEN;
}

export function closeCode(errOrClose: unknown): number | undefined {
  if (typeof errOrClose === "object" && errOrClose !== null && "code" in errOrClose) {
    const code = (errOrClose as { code: unknown }).code;
    return typeof code === "number" ? code : undefined;
  }
  return undefined;
}

export const STATE_LABELS: Record<ConnectionState, string> = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  offline: "Offline",
  unauthorized: "Signed out",
};
