/**
 * What a WAITING run waits for, in words (pure, so it is tested without a browser).
 *
 * `waitingFor` is the signal's name (null: a durable sleep); `wakeAt` is when the timer, or the
 * signal's timeout, fires (null: a wait with no timeout).
 */

import { formatRelative } from "./format";

export interface WaitingFields {
  waitingFor?: string | null;
  wakeAt?: string | null;
}

/** "14:02" today, "Mar 4, 14:02" another day: in the person's own time zone. */
export function formatClock(iso: string, now: number = Date.now()): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const sameDay = date.toDateString() === new Date(now).toDateString();
  return sameDay
    ? date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

/**
 * "Waiting for the signal `approval` until 14:02 (in 58 min)." / "Sleeping until 14:02 (in 3 s)."
 * A time already past says the wake-up is due (the relay moves it within a second or so).
 */
export function waitingSentence(
  run: WaitingFields,
  now: number = Date.now(),
  clock: (iso: string, now: number) => string = formatClock,
): string {
  const what = run.waitingFor ? `Waiting for the signal \`${run.waitingFor}\`` : "Sleeping";
  if (!run.wakeAt) {
    return run.waitingFor ? `${what}, with no timeout.` : `${what}, with no wake-up time.`;
  }
  const due = new Date(run.wakeAt).getTime() <= now;
  const when = `${clock(run.wakeAt, now)} (${formatRelative(run.wakeAt, now)})`;
  if (due) {
    const fires = run.waitingFor ? "its timeout is due" : "its timer is due";
    return `${what} until ${when}: ${fires}, so it resumes in a moment.`;
  }
  return `${what} until ${when}.`;
}

/** The sentence's follow-up: what ends the wait, and that no worker is held meanwhile. */
export function waitingDetail(run: WaitingFields): string {
  if (run.waitingFor) {
    return `A signal named \`${run.waitingFor}\` resumes it${run.wakeAt ? "; with none by then it resumes without one (timed out)" : ""}. It holds no worker meanwhile.`;
  }
  return "Its timer resumes it. It holds no worker meanwhile.";
}
