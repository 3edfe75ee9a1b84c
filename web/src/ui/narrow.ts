import { useSyncExternalStore } from "react";

/** Below this width the filters fold away and tables become cards (styles.css says the same). */
export const NARROW = "(max-width: 599px)";

function subscribe(listener: () => void): () => void {
  const query = window.matchMedia(NARROW);
  query.addEventListener("change", listener);
  return () => query.removeEventListener("change", listener);
}

/** Whether the window is narrower than 600 px (a phone), live as it is resized. */
export function useNarrow(): boolean {
  return useSyncExternalStore(subscribe, () => window.matchMedia(NARROW).matches);
}
