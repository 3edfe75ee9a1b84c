/**
 * An honest attempt count (pure, tested without a browser). A run's `attempt` counts every claim:
 * a resume from WAITING and a take-over after a lost worker are claims too, but neither is a
 * retry. So the label counts retries from the timeline (attempts that ended `retrying`), adds
 * `retriesLeft` for the total allowed, and says the resumes and lost workers apart:
 * "Attempt 1 of 3, resumed twice".
 */

import type { Waterfall } from "./waterfall";

export interface AttemptCount {
  /** 1 + the retries so far */
  attempt: number;
  /** 1 + the retries allowed in all (null: retriesLeft unknown) */
  of: number | null;
  resumed: number;
  lost: number;
}

export function countAttempts(waterfall: Pick<Waterfall, "bands" | "waits">, retriesLeft: number | null | undefined): AttemptCount {
  const retries = waterfall.bands.filter((b) => b.end === "retrying").length;
  const lost = waterfall.bands.filter((b) => b.end === "lost").length;
  const resumed = waterfall.waits.filter((w) => w.by === "timer" || w.by === "signal" || w.by === "timeout").length;
  return { attempt: retries + 1, of: retriesLeft == null ? null : retries + 1 + retriesLeft, resumed, lost };
}

const TIMES = ["", "once", "twice"];

function times(n: number): string {
  return TIMES[n] ?? `${n} times`;
}

export function attemptLabel(count: AttemptCount): string {
  const parts = [count.of === null ? `Attempt ${count.attempt}` : `Attempt ${count.attempt} of ${count.of}`];
  if (count.resumed > 0) parts.push(`resumed ${times(count.resumed)}`);
  if (count.lost > 0) parts.push(`lost its worker ${times(count.lost)}`);
  return parts.join(", ");
}

/** What retrying a settled run is called: "Run again" after a success, "Retry" otherwise. */
export function retryWord(status: string): string {
  return status === "SUCCEEDED" ? "Run again" : "Retry";
}
