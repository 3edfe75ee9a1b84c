import { attemptLabel, countAttempts } from "../../ui/attempts";
import { formatRelative, formatTime, shortId } from "../../ui/format";
import { APPROVAL } from "../../ui/signal";
import { waitingDetail, waitingSentence } from "../../ui/waiting";
import { formatMs, RESUMED_WORDS, type Waterfall } from "../../ui/waterfall";
import type { DetailRun } from "./types";


const NO_TIMELINE: Waterfall = { bands: [], waits: [], span: 0, queued: null };

/**
 * In words: why the run is where it is, from the fields the API gives and the timeline. With the
 * timeline not all read yet (`waterfall` null), nothing is said that it would be needed for
 * (which attempt, the waits before, the lost attempts) and the last line says it is being read.
 */
export function whyLines(run: DetailRun, whole: Waterfall | null, now: number): string[] {
  const lines = whyFromTimeline(run, whole ?? NO_TIMELINE, now, whole !== null);
  if (whole === null) lines.push("Reading its whole timeline: the attempts and waits show once it is all in.");
  return lines;
}

function whyFromTimeline(run: DetailRun, waterfall: Waterfall, now: number, known: boolean): string[] {
  const lines: string[] = [];
  if (run.retriedFromId) lines.push(`It retries run ${shortId(run.retriedFromId)}, with the same input.`);
  switch (run.status) {
    case "QUEUED":
      lines.push(queuedLine(run, now));
      break;
    case "RUNNING": {
      lines.push(known ? `${attemptLabel(countAttempts(waterfall, run.retriesLeft))}: running.` : "Running.");
      if (run.heartbeatAt) {
        lines.push(`Its worker was last heard from at ${formatTime(run.heartbeatAt)} (${formatRelative(run.heartbeatAt, now)}).`);
      }
      if (run.leaseExpiresAt) {
        const left = new Date(run.leaseExpiresAt).getTime() - now;
        lines.push(
          left > 0
            ? `Its lease runs out at ${formatTime(run.leaseExpiresAt)} unless the worker heartbeats first: if the worker stops answering, another worker takes the run over then.`
            : `Its lease ran out at ${formatTime(run.leaseExpiresAt)} (${formatRelative(run.leaseExpiresAt, now)}) with no heartbeat: another worker takes the run over.`,
        );
      }
      if (run.cancelRequestedAt) lines.push("Cancel was requested: it stops before its next turn.");
      if (run.pausedAt) lines.push(`Paused at ${formatTime(run.pausedAt)}: the step in flight completes, and it stops before its next step.`);
      break;
    }
    case "WAITING":
      lines.push(waitingSentence(run, now));
      lines.push(waitingDetail(run));
      if (run.waitingFor === APPROVAL) lines.push("Approve or Reject below sends it `{approved: true}` or `{approved: false}`.");
      break;
    case "SUCCEEDED":
      lines.push(
        known
          ? `It succeeded ${formatRelative(run.finishedAt, now)} (${attemptLabel(countAttempts(waterfall, run.retriesLeft))}).`
          : `It succeeded ${formatRelative(run.finishedAt, now)}.`,
      );
      break;
    case "FAILED":
      lines.push(`It failed ${formatRelative(run.finishedAt, now)}${run.error ? `: ${run.error}` : "."}`);
      break;
    case "CANCELLED":
      lines.push(`It was cancelled ${formatRelative(run.finishedAt, now)}.`);
      break;
    default:
      // A status newer than this app: say it as it is.
      lines.push(`Its status is ${run.status}.`);
  }
  for (const wait of waterfall.waits) {
    if (wait.by !== null) lines.push(pastWait(wait)); // the current wait is said above
  }
  for (const band of waterfall.bands) {
    if (band.end === "lost") {
      const silent = band.alive ?? 0;
      lines.push(
        `Attempt ${band.attempt} lost its worker: silent after ${formatMs(silent)}, taken over ${formatMs(band.duration)} after it was claimed.`,
      );
    } else if (band.end === "retrying") {
      const error = (band.endData as { error?: unknown } | null)?.error;
      lines.push(`Attempt ${band.attempt} hit a retryable fault${typeof error === "string" ? ` (${error})` : ""} and was retried.`);
    }
  }
  if ((run.lostAttempts ?? 0) > 0) {
    lines.push(
      `${run.lostAttempts} attempt(s) lost their worker; they use up no retry, but a run fails after losing its worker 3 times.`,
    );
  }
  return lines;
}


/** Why a QUEUED run has not started: its turn in its key's line, its tenant's cap, or a worker. */
export function queuedLine(run: Pick<DetailRun, "createdAt" | "key" | "queuedBehindId" | "waitingReason">, now: number): string {
  if (run.queuedBehindId) {
    const key = run.key ? `its key \`${run.key}\`` : "its agent's default key";
    return (
      `Queued behind run ${shortId(run.queuedBehindId)}, the run just ahead of it in the line of ${key}: ` +
      "runs of one key start one at a time, in order, so it starts once every run ahead of it has settled."
    );
  }
  return run.waitingReason
    ? `Waiting for a slot: ${run.waitingReason}.`
    : `Queued ${formatRelative(run.createdAt, now)}, waiting for a worker to claim it.`;
}

/** Waits that are not a signal's, by their `for`: what the run did, then how it went on. */
const HELD_FOR: Record<string, [string, string]> = {
  children: ["waited for its child runs", "went on once they had settled"],
  budget: ["was held by a budget", "was let go"],
  pause: ["was paused", "was resumed"],
  version: ["was held on its code version", "was resumed"],
};

const ENDED_WHILE = new Set(["timeout", "cancelled", "failed", "succeeded"]);

/** One finished wait in a sentence: "It slept for 2.0 s, then was woken by its timer." */
export function pastWait(wait: { for: string | null; by: string | null; duration: number }): string {
  const held = wait.for === null ? null : HELD_FOR[wait.for];
  const what = wait.for === null ? "slept" : held ? held[0] : `waited for the signal \`${wait.for}\``;
  const by = wait.by ?? "resumed";
  // a hold ends its own way, unless the run timed out or settled while held
  const after = held && !ENDED_WHILE.has(by) ? held[1] : `was ${RESUMED_WORDS[by] ?? by}`;
  return `It ${what} for ${formatMs(wait.duration)}, then ${after}.`;
}
