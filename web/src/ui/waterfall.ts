/**
 * A run's waterfall, worked out from its timeline alone (pure, so it is tested without a browser).
 *
 * The timeline is the record: `claimed {attempt}` opens an attempt; `turn`, `message` and any
 * other event inside it is a segment that ran from the previous mark to that event; the attempt
 * ends with `lost` (its worker stopped answering: the segment after its last sign of life is
 * silence), `retrying` (a retryable fault), `released` (its worker stopped gracefully), or the
 * settle (`succeeded`, `failed`, `cancelled`). An attempt with no end yet is still running.
 * Before the first claim, the run waited in the queue.
 *
 * Durable steps and waits (a later phase) slot in as more segment kinds in the same bands.
 */

export interface TimelineEvent {
  seq: number;
  type: string;
  data: unknown;
  at: string;
}

export type AttemptEnd = "lost" | "retrying" | "released" | "succeeded" | "failed" | "cancelled" | "running";

export interface Segment {
  seq: number;
  label: string;
  type: string;
  /** ms from the run's creation */
  offset: number;
  /** ms */
  duration: number;
  data: unknown;
}

export interface Band {
  attempt: number;
  end: AttemptEnd;
  /** ms from the run's creation */
  offset: number;
  duration: number;
  /** lost: ms from the start of the band to its last sign of life (the rest is silence) */
  alive: number | null;
  segments: Segment[];
  /** the event that ended the band (its data: the error, the delay), if any */
  endData: unknown;
}

export interface Waterfall {
  /** ms the run waited in the queue before its first claim (null: never claimed) */
  queued: number | null;
  bands: Band[];
  /** ms from creation to the last thing shown (settle, or now) */
  span: number;
}

const ENDS = new Set(["lost", "retrying", "released", "succeeded", "failed", "cancelled"]);
/** Marks inside an attempt that are instants, not work (no segment of their own). */
const INSTANTS = new Set(["cancel_requested"]);

function ms(iso: string): number {
  return new Date(iso).getTime();
}

function labelOf(event: TimelineEvent): string {
  const data = event.data as Record<string, unknown> | null;
  if (event.type === "turn" && data && typeof data["turn"] === "number") return `turn ${data["turn"]}`;
  return event.type;
}

function attemptOf(event: TimelineEvent): number | null {
  const data = event.data as Record<string, unknown> | null;
  return data && typeof data["attempt"] === "number" ? data["attempt"] : null;
}

export function buildWaterfall(
  events: readonly TimelineEvent[],
  run: { createdAt: string; finishedAt: string | null },
  now: number = Date.now(),
): Waterfall {
  const t0 = ms(run.createdAt);
  const bands: Band[] = [];
  let open: (Band & { mark: number; last: number }) | null = null;
  let queued: number | null = null;

  const close = (end: AttemptEnd, at: number, data: unknown) => {
    if (!open) return;
    const { mark: _mark, last, ...band } = open;
    band.end = end;
    band.duration = Math.max(0, at - t0 - band.offset);
    band.alive = end === "lost" ? Math.max(0, last - t0 - band.offset) : null;
    band.endData = data;
    bands.push(band);
    open = null;
  };

  for (const event of events) {
    const at = ms(event.at);
    if (event.type === "claimed") {
      if (open) close("lost", at, null); // a claim while one is open: the previous one was taken over
      if (queued === null) queued = Math.max(0, at - t0);
      open = {
        attempt: attemptOf(event) ?? bands.length + 1,
        end: "running",
        offset: Math.max(0, at - t0),
        duration: 0,
        alive: null,
        segments: [],
        endData: null,
        mark: at,
        last: at,
      };
      continue;
    }
    if (ENDS.has(event.type)) {
      close(event.type as AttemptEnd, at, event.data);
      continue;
    }
    if (!open) continue; // e.g. cancel_requested while queued
    open.last = at;
    if (INSTANTS.has(event.type)) continue;
    open.segments.push({
      seq: event.seq,
      label: labelOf(event),
      type: event.type,
      offset: Math.max(0, open.mark - t0),
      duration: Math.max(0, at - open.mark),
      data: event.data,
    });
    open.mark = at;
  }
  const end = run.finishedAt ? ms(run.finishedAt) : now;
  if (open) {
    const current: Band & { mark: number; last: number } = open;
    close("running", Math.max(end, current.last), null);
  }
  const lastBand = bands[bands.length - 1];
  const span = Math.max(end - t0, lastBand ? lastBand.offset + lastBand.duration : 0, 1);
  return { queued, bands, span };
}

/** "1.2 s", "340 ms", "2 min 5 s", "1 h 3 min". */
export function formatMs(value: number): string {
  if (value < 1000) return `${Math.round(value)} ms`;
  const s = value / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s - m * 60)} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${m - h * 60} min`;
}

export const END_WORDS: Record<AttemptEnd, string> = {
  lost: "lost its worker",
  retrying: "failed, retrying",
  released: "released (worker stopped)",
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "cancelled",
  running: "running",
};
