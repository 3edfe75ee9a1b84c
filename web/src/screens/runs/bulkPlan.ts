/** The bulk actions on ticked runs: which runs each touches, and its words (pure: tested without
 * a browser). */

import { ACTIVE_STATUSES, type RunStatus } from "../../api/types";

/** A ticked run, as the bulk actions need it. */
export interface Ticked {
  id: string;
  status: RunStatus;
}

export type BulkAction = "cancel" | "retry" | "replay";

/** What each action does, which runs it applies to, and how its words read. */
export const BULK: Record<
  BulkAction,
  {
    button: string;
    ask: (n: number) => string;
    go: (n: number) => string;
    done: string;
    applies: (s: RunStatus) => boolean;
    skipped: string;
  }
> = {
  cancel: {
    button: "Cancel",
    ask: (n) => `Cancel ${runsWord(n)}?`,
    go: (n) => `Cancel ${runsWord(n)}`,
    done: "cancelled",
    applies: (s) => ACTIVE_STATUSES.includes(s),
    skipped: "already settled",
  },
  retry: {
    button: "Retry from where it failed",
    ask: (n) => `Retry ${runsWord(n)} from where ${n === 1 ? "it" : "they"} failed?`,
    go: (n) => `Retry ${runsWord(n)}`,
    done: "retried",
    applies: (s) => s === "FAILED" || s === "CANCELLED",
    skipped: "not failed or cancelled",
  },
  replay: {
    button: "Replay",
    ask: (n) => `Replay ${runsWord(n)} from the start, with the same input?`,
    go: (n) => `Replay ${runsWord(n)}`,
    done: "replayed",
    applies: (s) => !ACTIVE_STATUSES.includes(s),
    skipped: "still active",
  },
};

/** `n runs`, in words. */
export function runsWord(n: number): string {
  return n === 1 ? "1 run" : `${n} runs`;
}

/** The runs an action would touch, and those it leaves alone (pure: tested without a browser). */
export function planBulk(action: BulkAction, ticked: readonly Ticked[]): { touch: Ticked[]; skip: Ticked[] } {
  const applies = BULK[action].applies;
  return { touch: ticked.filter((r) => applies(r.status)), skip: ticked.filter((r) => !applies(r.status)) };
}
