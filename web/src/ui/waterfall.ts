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
 * Durable steps and waits: a `step {name, occurrence}` is a segment of its own kind, from the
 * attempt's previous step (or its claim) to the step's commit. `waiting {for, until}` ends the
 * attempt ("waiting": it parked, holding no worker) and opens a wait band, closed by `resumed {by}`
 * (timer, signal, timeout) or by the settle of a run cancelled while it waited. `signal {name}`
 * events are noted on the wait they arrive in.
 */

export interface TimelineEvent {
  seq: number;
  type: string;
  data: unknown;
  at: string;
}

export type AttemptEnd =
  | "lost"
  | "retrying"
  | "released"
  | "waiting"
  | "succeeded"
  | "failed"
  | "cancelled"
  | "running";

/** A durable sleep or a wait for a signal: from its `waiting` event to its `resumed` one. */
export interface WaitBand {
  seq: number;
  /** the signal's name; null for a durable sleep */
  for: string | null;
  /** when its timer (or the signal's timeout) fires, as the `waiting` event said */
  until: string | null;
  /** ms from the run's creation */
  offset: number;
  /** ms (until now while it still waits) */
  duration: number;
  /** what ended it: "timer", "signal", "timeout", or a settle ("cancelled"); null: still waiting */
  by: string | null;
  /** the names of the signals that arrived while it waited */
  signals: string[];
}

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
  /** the durable sleeps and waits, in order */
  waits: WaitBand[];
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
  if (event.type === "retrying" && data && typeof data["step"] === "string") return `call of ${data["step"]} retried`;
  if (event.type === "step" && data && typeof data["name"] === "string") {
    return `step ${data["name"]}${typeof data["occurrence"] === "number" ? ` #${data["occurrence"]}` : ""}`;
  }
  return event.type;
}

function field(data: unknown, key: string): unknown {
  return data !== null && typeof data === "object" ? (data as Record<string, unknown>)[key] : undefined;
}

function stringOrNull(value: unknown): string | null {
  return typeof value === "string" ? value : null;
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
  let open: (Band & { mark: number; last: number; stepMark: number }) | null = null;
  let queued: number | null = null;
  const waits: WaitBand[] = [];
  let waiting: WaitBand | null = null;

  const resume = (by: string, at: number) => {
    if (!waiting) return;
    waiting.by = by;
    waiting.duration = Math.max(0, at - t0 - waiting.offset);
    waiting = null;
  };

  const close = (end: AttemptEnd, at: number, data: unknown) => {
    if (!open) return;
    const { mark: _mark, stepMark: _stepMark, last, ...band } = open;
    band.end = end;
    band.duration = Math.max(0, at - t0 - band.offset);
    band.alive = end === "lost" ? Math.max(0, last - t0 - band.offset) : null;
    band.endData = data;
    bands.push(band);
    open = null;
  };

  for (const event of events) {
    const at = ms(event.at);
    if (event.type === "waiting") {
      close("waiting", at, event.data); // the attempt parked: it holds no worker while it waits
      waiting = {
        seq: event.seq,
        for: stringOrNull(field(event.data, "for")),
        until: stringOrNull(field(event.data, "until")),
        offset: Math.max(0, at - t0),
        duration: 0,
        by: null,
        signals: [],
      };
      waits.push(waiting);
      continue;
    }
    if (event.type === "resumed") {
      resume(stringOrNull(field(event.data, "by")) ?? "resumed", at);
      continue;
    }
    if (event.type === "signal" && waiting) {
      waiting.signals.push(stringOrNull(field(event.data, "name")) ?? "?");
      continue;
    }
    if (event.type === "claimed") {
      resume("resumed", at); // a claim ends any wait (its `resumed` line should have come first)
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
        stepMark: at,
      };
      continue;
    }
    // A `retrying` that names a step is one of its calls made again inside the attempt (a
    // step's own retry policy): a segment of the attempt, not its end.
    if (ENDS.has(event.type) && !(event.type === "retrying" && field(event.data, "step") !== undefined)) {
      resume(event.type, at); // e.g. cancelled while it waited
      close(event.type as AttemptEnd, at, event.data);
      continue;
    }
    if (!open) continue; // e.g. cancel_requested while queued
    open.last = at;
    if (INSTANTS.has(event.type)) continue;
    if (event.type === "step") {
      // A step ran from the attempt's previous step (or its claim) to its commit; the events it
      // emitted are segments of their own, inside it.
      open.segments.push({
        seq: event.seq,
        label: labelOf(event),
        type: "step",
        offset: Math.max(0, open.stepMark - t0),
        duration: Math.max(0, at - open.stepMark),
        data: event.data,
      });
      open.stepMark = at;
      open.mark = at;
      continue;
    }
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
  const still = waiting as WaitBand | null;
  if (still) still.duration = Math.max(0, end - t0 - still.offset);
  const lastBand = bands[bands.length - 1];
  const lastWait = waits[waits.length - 1];
  const span = Math.max(
    end - t0,
    lastBand ? lastBand.offset + lastBand.duration : 0,
    lastWait ? lastWait.offset + lastWait.duration : 0,
    1,
  );
  return { queued, bands, waits, span };
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
  waiting: "parked, waiting",
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "cancelled",
  running: "running",
};

/** How a wait ended, in words ("by" of its `resumed` event, or the settle that ended it). */
export const RESUMED_WORDS: Record<string, string> = {
  timer: "woken by its timer",
  signal: "woken by a signal",
  timeout: "timed out",
  cancelled: "cancelled while waiting",
  failed: "failed while waiting",
  succeeded: "settled",
  resumed: "resumed",
};
