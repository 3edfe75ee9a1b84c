/**
 * Reconnect delays: exponential backoff with full jitter.
 *
 * Attempt n (0-based) waits a uniformly random time in [0, min(cap, base * 2^n)). Full jitter
 * spreads a crowd of clients that lost the same server (a redeploy closes every socket at once)
 * over the whole window instead of having them knock again in lockstep.
 */

export interface BackoffOptions {
  /** the window of the first retry, in ms */
  baseMs?: number;
  /** no window grows past this, in ms */
  capMs?: number;
  /** a number in [0, 1); Math.random by default (tests pass their own) */
  random?: () => number;
}

export const BACKOFF_BASE_MS = 500;
export const BACKOFF_CAP_MS = 30_000;

/** The upper bound of attempt `attempt`'s delay: min(cap, base * 2^attempt). */
export function backoffWindow(attempt: number, options: BackoffOptions = {}): number {
  const base = options.baseMs ?? BACKOFF_BASE_MS;
  const cap = options.capMs ?? BACKOFF_CAP_MS;
  const n = Math.max(0, Math.floor(attempt));
  // 2^n overflows to Infinity for a huge n, and min() then gives the cap: no special case needed.
  return Math.min(cap, base * 2 ** n);
}

/** The delay before retry `attempt` (0 for the first retry), in whole ms. */
export function backoffDelay(attempt: number, options: BackoffOptions = {}): number {
  const random = options.random ?? Math.random;
  const r = Math.min(Math.max(random(), 0), 1 - Number.EPSILON);
  return Math.floor(r * backoffWindow(attempt, options));
}

/**
 * Waits `ms`, or less when `wake` fires first (the browser came back online, the tab came back
 * into view): a reconnect should not sit out a 30 s window the user is waiting on.
 */
export function waitOrWake(ms: number, wake: EventTarget, events: readonly string[]): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      for (const type of events) wake.removeEventListener(type, done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const type of events) wake.addEventListener(type, done);
  });
}
