/**
 * Turning nudges, reconnects and focus into re-queries of the active queries. Nothing here reads
 * a nudge beyond its type and id, and nothing writes to the cache but the API's own answers.
 */

import type { ApolloClient, ObservableQuery } from "@apollo/client";
import { RUN_DETAIL } from "../api/documents/runs";
import { type ActiveQuery, type NudgeLike, planNudges } from "./invalidation";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyQuery = ObservableQuery<any, any>;

/** Nudges closer together than this are one burst: asked for once, at the end of the window. */
export const BURST_MS = 50;

/**
 * Coalesces bursts: the first call after a quiet spell is flushed at once (no added latency for a
 * lone nudge); the ones that follow within `windowMs` are flushed together when the window ends.
 */
export class BurstGate<T> {
  private pending: T[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly flush: (items: T[]) => void,
    private readonly windowMs = BURST_MS,
  ) {}

  push(item: T): void {
    this.pending.push(item);
    if (this.timer === undefined) this.drain();
  }

  private drain(): void {
    const items = this.pending;
    this.pending = [];
    if (items.length === 0) {
      this.timer = undefined;
      return;
    }
    this.flush(items);
    this.timer = setTimeout(() => this.drain(), this.windowMs);
  }
}

type Edges = { edges?: { node?: { id?: string } }[] };

/** Whether a query's current answer holds that run: a runs list's row, or a run's child. */
function shows(query: AnyQuery, runId: string): boolean {
  const data = query.getCurrentResult().data as { runs?: Edges; run?: { children?: Edges } } | undefined;
  const edges = data?.runs?.edges ?? data?.run?.children?.edges ?? [];
  return edges.some((e) => e.node?.id === runId);
}

/**
 * Re-queries with back-pressure: while something is being asked again, further nudges for it only
 * mark it dirty, and it is asked once more when the answer is in. With the burst gate in front, a
 * burst of a hundred nudges costs at most two requests per thing it concerns, and the last answer
 * is never older than the last nudge.
 */
export class Refresher {
  private slots = new Map<unknown, { again: boolean }>();
  private readonly gate = new BurstGate<NudgeLike>((nudges) => this.apply(nudges));

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

  /** Takes a nudge; it is acted on at once, or with the rest of its burst. */
  nudge(nudge: NudgeLike): void {
    this.gate.push(nudge);
  }

  /** Asks for the least that covers these nudges (see `planNudges`); how many things it asked. */
  apply(nudges: readonly NudgeLike[]): number {
    const queries = this.client.getObservableQueries("active");
    const list = [...queries];
    const active: ActiveQuery[] = list.map((q) => ({
      name: q.queryName,
      variables: q.variables as Record<string, unknown>,
      shows: (id) => shows(q, id),
    }));
    const actions = planNudges(nudges, active);
    for (const action of actions) {
      if (action.kind === "refetch") this.refresh(list[action.index]!);
      else this.fetchRun(action.id);
    }
    return actions.length;
  }

  /** Asks every active query again: on (re)connect, on focus, when the browser is back online. */
  all(): void {
    for (const query of this.client.getObservableQueries("active")) this.refresh(query);
  }

  private refresh(query: AnyQuery): void {
    const ask = (query.queryName && this.askAgain[query.queryName]) || ((q: AnyQuery) => q.refetch());
    this.once(query, () => ask(query, this.client));
  }

  /** One run, network-only: the cache's `Run:<id>` changes, and every list showing it with it. */
  private fetchRun(id: string): void {
    this.once(`run:${id}`, () =>
      this.client.query({ query: RUN_DETAIL, variables: { id }, fetchPolicy: "network-only" }),
    );
  }

  private once(key: unknown, ask: () => Promise<unknown>): void {
    const slot = this.slots.get(key);
    if (slot) {
      slot.again = true;
      return;
    }
    const next = { again: false };
    this.slots.set(key, next);
    void (async () => {
      try {
        do {
          next.again = false;
          await ask().catch(() => undefined); // the screen shows the error itself
        } while (next.again);
      } finally {
        this.slots.delete(key);
      }
    })();
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
