/**
 * Turning nudges, reconnects and focus into re-queries of the active queries. Nothing here reads
 * a nudge beyond its type and id, and nothing writes to the cache but the API's own answers.
 */

import type { ApolloClient, ObservableQuery } from "@apollo/client";
import { type NudgeLike, nudgeConcerns } from "./invalidation";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyQuery = ObservableQuery<any, any>;

interface Slot {
  running: Promise<void>;
  again: boolean;
}

/**
 * Re-queries with back-pressure: while a query is being asked again, further nudges for it only
 * mark it dirty, and it is asked once more when the answer is in. A burst of a hundred nudges
 * costs two requests, and the last answer is never older than the last nudge.
 */
export class Refresher {
  private slots = new Map<AnyQuery, Slot>();

  /**
   * `askAgain` by operation name overrides the plain refetch: the timeline asks only for the
   * events after the last one it has (they are immutable and numbered without gaps).
   */
  constructor(
    private readonly client: ApolloClient,
    private readonly askAgain: Record<
      string,
      (query: AnyQuery, client: ApolloClient) => Promise<unknown>
    > = {},
  ) {}

  /** Asks again every active query the nudge concerns; returns how many it touched. */
  nudge(nudge: NudgeLike): number {
    let count = 0;
    for (const query of this.client.getObservableQueries("active")) {
      if (nudgeConcerns(nudge, query.queryName, query.variables as Record<string, unknown>)) {
        this.refresh(query);
        count++;
      }
    }
    return count;
  }

  /** Asks every active query again: on (re)connect, on focus, when the browser is back online. */
  all(): void {
    for (const query of this.client.getObservableQueries("active")) this.refresh(query);
  }

  private refresh(query: AnyQuery): void {
    const slot = this.slots.get(query);
    if (slot) {
      slot.again = true;
      return;
    }
    const next: Slot = { running: Promise.resolve(), again: false };
    next.running = (async () => {
      try {
        do {
          next.again = false;
          const ask =
            (query.queryName && this.askAgain[query.queryName]) || ((q: AnyQuery) => q.refetch());
          await ask(query, this.client).catch(() => undefined); // the screen shows the error itself
        } while (next.again);
      } finally {
        this.slots.delete(query);
      }
    })();
    this.slots.set(query, next);
  }
}

/**
 * Refetch on focus and when the tab comes back into view, at most once every `minGapMs`: with the
 * socket down (a proxy that drops WebSockets, a laptop that slept) the app is still right where the
 * person is looking.
 */
export function refreshOnFocus(refresher: Refresher, minGapMs = 2000): () => void {
  let last = 0;
  const maybe = () => {
    if (document.visibilityState !== "visible") return;
    const now = Date.now();
    if (now - last < minGapMs) return;
    last = now;
    refresher.all();
  };
  window.addEventListener("focus", maybe);
  document.addEventListener("visibilitychange", maybe);
  window.addEventListener("online", maybe);
  return () => {
    window.removeEventListener("focus", maybe);
    document.removeEventListener("visibilitychange", maybe);
    window.removeEventListener("online", maybe);
  };
}
