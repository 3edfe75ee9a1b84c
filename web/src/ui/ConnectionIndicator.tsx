import { useConnectionState } from "../app/realtime";
import { STATE_LABELS } from "../realtime/connection";

const HINTS = {
  connecting: "Opening the live connection.",
  live: "Live: changes show up as they happen.",
  reconnecting: "The live connection dropped; retrying. The app still works and refreshes as you move around.",
  offline: "No network. The app refreshes when you are back.",
  unauthorized: "The API refused the token.",
} as const;

/** Live, reconnecting or offline: what the nudge socket is doing, said in words and colour. */
export function ConnectionIndicator() {
  const state = useConnectionState();
  return (
    <div
      className={`connection connection-${state}`}
      role="status"
      aria-live="polite"
      aria-label="Connection"
      data-state={state}
      title={HINTS[state]}
    >
      <span className="connection-dot" aria-hidden="true" />
      <span className="connection-label">{STATE_LABELS[state]}</span>
    </div>
  );
}
