/** The runs list's actions on every run its filters match, not only the ticked rows: which runs each
 * takes (the list's filters, narrowed to the statuses it can act on), and its words (pure: tested
 * without a browser). The server counts and acts (cancelRunsCount / cancelRuns, replayRunsCount /
 * replayRuns); the list only says what it asks for. */

import type { CancelRunsFilter, ReplayRunsFilter } from "../../api/generated";
import { ACTIVE_STATUSES, type RunStatus } from "../../api/types";
import type { RunFilters } from "../runFilters";

export type FilterAction = "cancel" | "replay";

/** At most this many runs in one bulk action (the server's `replay_max_runs`); the count asks for
 * no more, so "1,000" means "the oldest 1,000 of them". */
export const BY_FILTER_LIMIT = 1000;
/** A replay from the list starts at most this many runs a second (the Replays form sets its own). */
export const BY_FILTER_REPLAY_RATE = 5;

/** The statuses an action takes under the list's status filter; null: none of them applies (a list
 * of settled runs has nothing to cancel). No status filter: every active run for a cancel, the
 * failed runs for a replay (retry what failed). */
export function statusesFor(action: FilterAction, listed: readonly RunStatus[]): RunStatus[] | null {
  const applies = (s: RunStatus) => (action === "cancel" ? ACTIVE_STATUSES.includes(s) : !ACTIVE_STATUSES.includes(s));
  if (listed.length === 0) return action === "cancel" ? [...ACTIVE_STATUSES] : ["FAILED"];
  const taken = listed.filter(applies);
  return taken.length ? taken : null;
}

/** The server's filter for an action, from the list's filters; null when it does not apply. */
export function filterFor(action: FilterAction, f: RunFilters): CancelRunsFilter | ReplayRunsFilter | null {
  const status = statusesFor(action, f.status);
  if (status === null) return null;
  return {
    status,
    agent: f.agent,
    since: f.from,
    before: f.to,
    key: f.key,
    tags: f.tags.length ? f.tags : null,
    topLevel: f.topLevel,
  };
}

/** `1,234 runs`, in words. */
export function manyRuns(n: number): string {
  return n === 1 ? "1 run" : `${n.toLocaleString("en-US")} runs`;
}

/** The words of each action: its button, the question once counted, and what it says when the
 * count is nothing. */
export const BY_FILTER: Record<
  FilterAction,
  {
    button: string;
    ask: (n: number, statuses: readonly RunStatus[]) => string;
    go: (n: number) => string;
    none: string;
    doing: string;
    done: string;
  }
> = {
  cancel: {
    button: "Cancel all matching…",
    ask: (n, statuses) =>
      `Cancel ${capped(n)} matching these filters (${statusWords(statuses)})? Running ones stop before their next step.`,
    go: (n) => `Yes, cancel ${manyRuns(n)}`,
    none: "No active run matches these filters: nothing to cancel.",
    doing: "Cancelling",
    done: "cancelled",
  },
  replay: {
    button: "Replay failed matching…",
    ask: (n, statuses) =>
      `Replay ${capped(n)} matching these filters (${statusWords(statuses)}) from the start, with the same input, at most ${BY_FILTER_REPLAY_RATE} a second?`,
    go: (n) => `Yes, replay ${manyRuns(n)}`,
    none: "No settled run matches these filters: nothing to replay.",
    doing: "Replaying",
    done: "replayed",
  },
};

/** "1,000 runs" at the cap says it is the oldest 1,000. */
function capped(n: number): string {
  return n >= BY_FILTER_LIMIT ? `the oldest ${manyRuns(n)}` : manyRuns(n);
}

/** "queued, running or waiting". */
export function statusWords(statuses: readonly RunStatus[]): string {
  const words = statuses.map((s) => s.toLowerCase());
  return words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}`;
}

/** A bulk action's progress in words: "40 of 120 cancelled (33%)". */
export function progressText(p: { kind: "CANCEL" | "REPLAY"; processed: number; total: number; started: number; cancelled: number; skipped: number }): string {
  const percent = p.total ? Math.round((p.processed / p.total) * 100) : 100;
  const acted = p.kind === "CANCEL" ? `${p.cancelled} cancelled` : `${p.started} started`;
  return `${p.processed} of ${p.total} processed (${percent}%) · ${acted} · ${p.skipped} skipped`;
}
