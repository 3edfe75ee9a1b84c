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
  pausedAt?: string | null;
  heldByBudgetId?: string | null;
}

/** The wait names a hold uses (CONTRACT §7 "Pauses"): no signal carries them. */
export const HELD_BY_BUDGET = "budget";
export const HELD_BY_PAUSE = "pause";
/** A run resumed on code that does not reach the steps it recorded (CONTRACT §7 "Versions"). */
export const HELD_BY_VERSION = "version";
/** A parent waiting for its children (`ctx.children`): no signal, no person. */
export const WAITS_FOR_CHILDREN = "children";
/** Waits that are not for a signal: a hold (pause, budget, code version) or the run's children. */
export const NOT_SIGNALS: ReadonlySet<string> = new Set([HELD_BY_BUDGET, HELD_BY_PAUSE, HELD_BY_VERSION, WAITS_FOR_CHILDREN]);

/**
 * What holds a run: a budget, a pause, its code version, or nothing (the wait names of CONTRACT §7
 * "Pauses" and "Versions").
 */
export function holdOf(run: WaitingFields & { status: string }): "budget" | "pause" | "version" | null {
  if (run.heldByBudgetId || (run.status === "WAITING" && run.waitingFor === HELD_BY_BUDGET)) return "budget";
  if (run.pausedAt || (run.status === "WAITING" && run.waitingFor === HELD_BY_PAUSE)) return "pause";
  if (run.status === "WAITING" && run.waitingFor === HELD_BY_VERSION) return "version";
  return null;
}

/** Whether the run waits for a signal a person (or a program) may send now. */
export function waitsForSignal(run: WaitingFields & { status?: string }): boolean {
  return (run.status === undefined || run.status === "WAITING") && !!run.waitingFor && !NOT_SIGNALS.has(run.waitingFor);
}

/** "14:02" today, "Mar 4, 14:02" another day: in the person's own time zone. */
export function formatClock(iso: string, now: number = Date.now()): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const sameDay = date.toDateString() === new Date(now).toDateString();
  return sameDay
    ? date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleString(undefined, {
        month: "short",
        day: "numeric",
        hour: "2-digit",
        minute: "2-digit",
      });
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
  if (run.waitingFor === HELD_BY_BUDGET) {
    return "Held by a budget: its next step would pass the budget's limit, so it did not start.";
  }
  if (run.waitingFor === HELD_BY_PAUSE) {
    return run.pausedAt
      ? `Paused since ${clock(run.pausedAt, now)} (${formatRelative(run.pausedAt, now)}).`
      : "Paused.";
  }
  if (run.waitingFor === HELD_BY_VERSION) {
    return "Held on its code version: the deployed code does not reach the steps this run recorded, so it did not go on.";
  }
  if (run.waitingFor === WAITS_FOR_CHILDREN) {
    return run.wakeAt
      ? `Waiting for its children, until ${clock(run.wakeAt, now)} (${formatRelative(run.wakeAt, now)}) at the latest.`
      : "Waiting for its children.";
  }
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
  if (run.waitingFor === HELD_BY_BUDGET) {
    return "It goes on by itself when the budget has room again (a raised limit, a new period, the budget deleted), or now with Raise once; nothing it recorded is bought again. It holds no worker meanwhile.";
  }
  if (run.waitingFor === HELD_BY_PAUSE) {
    return "Resume lets it go; its timers still come due meanwhile, and a signal sent meanwhile waits for it. It holds no worker meanwhile.";
  }
  if (run.waitingFor === WAITS_FOR_CHILDREN) {
    return "It goes on once the children it waits for have settled (the Tree tab shows them); it holds no worker meanwhile.";
  }
  if (run.waitingFor === HELD_BY_VERSION) {
    return "Its `version` event says where the code and the journal part. Deploy a fix (a rename behind `ctx.patched`, say; `outlive replay` checks it first), then Resume; or cancel it. Nothing it recorded is bought again. It holds no worker meanwhile.";
  }
  if (run.waitingFor) {
    return `A signal named \`${run.waitingFor}\` resumes it${run.wakeAt ? "; with none by then it resumes without one (timed out)" : ""}. It holds no worker meanwhile.`;
  }
  return "Its timer resumes it. It holds no worker meanwhile.";
}

/** A WAITING row's few words: "for approval", "sleeping until 14:02", "held by a budget", "paused". */
export function waitingShort(run: WaitingFields, now: number = Date.now()): string {
  if (run.waitingFor === HELD_BY_BUDGET) return "held by a budget";
  if (run.waitingFor === HELD_BY_PAUSE || run.pausedAt) return "paused";
  if (run.waitingFor === WAITS_FOR_CHILDREN) return "for its children";
  if (run.waitingFor === HELD_BY_VERSION) return "held on its code version";
  if (run.waitingFor) return `for ${run.waitingFor}`;
  return run.wakeAt ? `sleeping until ${formatClock(run.wakeAt, now)}` : "sleeping";
}

/**
 * Whether a WAITING run waits for a person: a signal, or a hold a person lifts (a budget, a pause,
 * a code version: a fix deployed, then Resume). A run waiting for its children does not.
 */
export function awaitsPerson(run: WaitingFields): boolean {
  return !!run.waitingFor && run.waitingFor !== WAITS_FOR_CHILDREN;
}
