/**
 * The nudge socket: graphql-ws on /graphql (graphql-transport-ws), one subscription `nudges`.
 *
 * - unlimited retries, exponential backoff with full jitter capped at 30 s (backoff.ts), cut short
 *   when the browser comes back online or the tab comes back into view;
 * - a close with 1012 (service restart) or 1001 (going away) is a reconnect like any other; only
 *   a refused token (4403) stops it (connection.ts);
 * - a close with 1013 (try again later: the process's socket cap, the tenant's, a socket that fell
 *   behind) is retried too, and backs off: it comes before `connection_ack`, and graphql-ws resets
 *   its retry count only on an ack, so each wait is drawn from a window twice the last;
 * - keep-alive: a ping every 10 s; no pong within 5 s and the socket is dropped and redialled;
 * - on every (re)connect, `onConnected` runs: the app asks every active query again, so a nudge
 *   missed while the socket was down costs nothing.
 *
 * A nudge is handed to `onNudge` as a tiny record and never stored.
 *
 * The same socket carries the run pages' `runOutput` subscriptions (`followOutput`, output.ts):
 * graphql-ws sends each again on reconnect, after the last chunk it handed on.
 */

import { type Client, createClient } from "graphql-ws";
import { backoffDelay, waitOrWake } from "./backoff";
import { type ConnectionEvent, type ConnectionState, closeCode, isReconnectable, nextState } from "./connection";
import type { NudgeLike } from "./invalidation";
import { type OutputChunk, OutputFollow, type OutputSink } from "./output";

export const NUDGES_SUBSCRIPTION = "subscription Nudges { nudges { type tenantId at id } }";

export const KEEP_ALIVE_MS = 10_000;
export const PONG_TIMEOUT_MS = 5_000;

export interface NudgeSocketOptions {
  url: string;
  token: () => string | null;
  onNudge: (nudge: NudgeLike) => void;
  onConnected: () => void;
  onRefused: () => void;
}

type Listener = (state: ConnectionState) => void;

export function socketUrl(location: Location): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/graphql`;
}

export class NudgeSocket {
  private client: Client | null = null;
  private unsubscribe: (() => void) | null = null;
  private state: ConnectionState = "connecting";
  private listeners = new Set<Listener>();
  private pongTimer: ReturnType<typeof setTimeout> | undefined;
  private restartTimer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private restarts = 0;
  private readonly follows = new Map<OutputFollow, () => void>(); // each with its unsubscribe
  private readonly onOffline = () => this.feed({ type: "browser-offline" });
  private readonly onOnline = () => this.feed({ type: "browser-online" });

  constructor(private readonly options: NudgeSocketOptions) {}

  get current(): ConnectionState {
    return this.state;
  }

  subscribe = (listener: Listener): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  getSnapshot = (): ConnectionState => this.state;

  start(): void {
    this.stopped = false;
    window.addEventListener("offline", this.onOffline);
    window.addEventListener("online", this.onOnline);
    if (!navigator.onLine) this.feed({ type: "browser-offline" });
    this.open();
  }

  stop(): void {
    this.stopped = true;
    window.removeEventListener("offline", this.onOffline);
    window.removeEventListener("online", this.onOnline);
    clearTimeout(this.pongTimer);
    clearTimeout(this.restartTimer);
    this.unsubscribe?.();
    for (const stop of this.follows.values()) stop();
    this.follows.clear();
    this.dispose();
  }

  /**
   * Follows one run's partial output until the run settles (`complete`), the server refuses
   * (`error`), or the returned function is called. It rides this socket: across reconnects, and
   * across a new client after the old one gave up, it resumes after the last chunk it handed on.
   */
  followOutput(runId: string, sink: OutputSink): () => void {
    const follow = new OutputFollow(runId, {
      ...sink,
      complete: () => {
        this.follows.delete(follow);
        sink.complete();
      },
      error: (error) => {
        this.follows.delete(follow);
        sink.error(error);
      },
    });
    this.follows.set(follow, () => undefined);
    if (this.client) this.subscribeOutput(this.client, follow);
    return () => {
      this.follows.get(follow)?.();
      this.follows.delete(follow);
    };
  }

  private subscribeOutput(client: Client, follow: OutputFollow): void {
    const current = () => this.client === client && this.follows.has(follow); // not a disposed client's
    const stop = client.subscribe<{ runOutput: OutputChunk }>(follow.payload, {
      next: (result) => {
        if (!current()) return;
        if (result.errors?.length) follow.fail(result.errors);
        else if (result.data?.runOutput) follow.take(result.data.runOutput);
      },
      error: (error) => {
        if (current()) follow.fail(error);
      },
      complete: () => {
        if (current()) follow.complete();
      },
    });
    this.follows.set(follow, stop);
  }

  /** Closes the client; a socket that never opened (a refused token) rejects, which is fine. */
  private dispose(): void {
    const client = this.client;
    this.client = null;
    if (client) Promise.resolve(client.dispose()).catch(() => undefined);
  }

  private feed(event: ConnectionEvent): void {
    const next = nextState(this.state, event);
    if (next === this.state) return;
    this.state = next;
    for (const l of this.listeners) l(next);
  }

  private open(): void {
    const client = createClient({
      url: this.options.url,
      lazy: false,
      connectionParams: () => {
        const token = this.options.token();
        return token ? { authorization: `Bearer ${token}` } : {};
      },
      retryAttempts: Infinity,
      retryWait: (retries) =>
        waitOrWake(backoffDelay(retries), window, ["online", "focus", "visibilitychange"]),
      shouldRetry: isReconnectable,
      keepAlive: KEEP_ALIVE_MS,
      connectionAckWaitTimeout: 10_000,
      onNonLazyError: (error) => this.gaveUp(error),
      on: {
        connecting: () => this.feed({ type: "connecting" }),
        connected: () => {
          this.restarts = 0;
          this.feed({ type: "connected" });
          this.options.onConnected();
        },
        closed: (event) => {
          clearTimeout(this.pongTimer);
          const code = closeCode(event);
          this.feed(code === undefined ? { type: "closed" } : { type: "closed", code });
        },
        ping: (received) => {
          if (received) return; // the server's ping; graphql-ws answers it
          clearTimeout(this.pongTimer);
          this.pongTimer = setTimeout(() => client.terminate(), PONG_TIMEOUT_MS);
        },
        pong: (received) => {
          if (received) clearTimeout(this.pongTimer);
        },
      },
    });
    this.client = client;
    for (const follow of this.follows.keys()) this.subscribeOutput(client, follow);
    this.unsubscribe = client.subscribe<{ nudges: NudgeLike }>(
      { query: NUDGES_SUBSCRIPTION },
      {
        next: (result) => {
          const nudge = result.data?.nudges;
          if (nudge) this.options.onNudge({ type: nudge.type, id: nudge.id ?? null });
        },
        error: () => undefined, // the connection's fate is told by `closed` and `gaveUp`
        complete: () => undefined,
      },
    );
  }

  /** The client stopped retrying: a refused token signs out; anything else starts over later. */
  private gaveUp(error: unknown): void {
    if (this.stopped) return;
    if (!isReconnectable(error)) {
      this.feed({ type: "closed", code: closeCode(error) ?? 4403 });
      this.options.onRefused();
      return;
    }
    this.feed({ type: "gave-up" });
    this.unsubscribe?.();
    this.dispose();
    const delay = backoffDelay(this.restarts++ + 6); // a protocol-level refusal: wait long
    this.restartTimer = setTimeout(() => {
      if (!this.stopped) this.open();
    }, delay);
  }
}
