/**
 * The Steps tab's reading of a run (pure, so it is tested without a browser): one row per
 * completed step with what its timeline says about it folded in (the events it emitted while it
 * ran, the calls it made again), a row per failure (an attempt that failed, was retried or was
 * lost), a search and a status filter, and consecutive calls of one step folded into a group
 * with their count and total time.
 *
 * Matching the timeline to the steps: inside an attempt (from its `claimed` event), the events
 * appended before a `step {name, occurrence}` event, since the previous one, were emitted while
 * that step ran (a step's events are written with it, in one statement); a `retrying` event with
 * a `step` field is one of that step's calls failing and being made again. A step copied from
 * another run (attempt 0, `retryRun(reuseSteps: true)`) has nothing on this timeline.
 */

export interface StepUsageLike {
  requests: number;
  inputTokens: number;
  outputTokens: number;
  model?: string | null;
  costUsd?: number | null;
}

export interface StepLike {
  seq: number;
  name: string;
  occurrence: number;
  attempt: number;
  completedAt: string;
  startedAt?: string | null;
  usage?: StepUsageLike | null;
}

export interface EventLike {
  seq: number;
  type: string;
  data: unknown;
  at: string;
}

/** One failed call of a step, made again after `waitS` (a `retrying` event with a `step`). */
export interface CallRetry {
  call: number;
  error: string;
  waitS: number | null;
  status: number | null;
}

export interface StepRow {
  kind: "step";
  key: string;
  step: StepLike;
  /** ms from its start to its commit; null when its start was not recorded */
  durationMs: number | null;
  /** the events it emitted while it ran, counted by type, in the order first seen */
  events: { type: string; count: number }[];
  retries: CallRetry[];
}

export interface FailureRow {
  kind: "failure";
  key: string;
  seq: number;
  attempt: number | null;
  /** "failed", "retrying" (the attempt failed and the run is tried again) or "lost" */
  type: string;
  error: string | null;
  at: string;
}

export type Row = StepRow | FailureRow;

export interface GroupRow {
  kind: "group";
  key: string;
  name: string;
  rows: StepRow[];
  /** the members' durations summed (those with a recorded start) */
  totalMs: number;
}

export type Folded = Row | GroupRow;

export type StepStatus = "all" | "retried" | "failed" | "usage";

export const STEP_STATUSES: { id: StepStatus; label: string }[] = [
  { id: "all", label: "All" },
  { id: "retried", label: "Calls retried" },
  { id: "failed", label: "Failures" },
  { id: "usage", label: "With model usage" },
];

const FAILURES = new Set(["failed", "retrying", "lost"]);
/** Events that mark the attempt, not a step's work: never counted as a step's events. */
const MARKS = new Set(["claimed", "step", "retrying", "waiting", "resumed", "released", "cancel_requested"]);

function field(data: unknown, key: string): unknown {
  return data !== null && typeof data === "object" ? (data as Record<string, unknown>)[key] : undefined;
}

function numberOr(value: unknown, fallback: number | null): number | null {
  return typeof value === "number" ? value : fallback;
}

function stepKey(attempt: number, name: string, occurrence: number): string {
  return `${attempt}/${name}#${occurrence}`;
}

interface Observed {
  events: Map<string, number>;
  retries: CallRetry[];
}

/** What the timeline says about each step (by attempt, name and occurrence), and its failures. */
function readTimeline(events: readonly EventLike[]): { observed: Map<string, Observed>; failures: FailureRow[] } {
  const observed = new Map<string, Observed>();
  const failures: FailureRow[] = [];
  const of = (key: string) => {
    let found = observed.get(key);
    if (!found) observed.set(key, (found = { events: new Map(), retries: [] }));
    return found;
  };
  let attempt = 0;
  let pending = new Map<string, number>();
  for (const event of events) {
    const { type, data } = event;
    if (type === "claimed") {
      attempt = numberOr(field(data, "attempt"), attempt + 1) ?? attempt + 1;
      pending = new Map();
    } else if (type === "step") {
      const name = String(field(data, "name") ?? "?");
      const occurrence = numberOr(field(data, "occurrence"), 0) ?? 0;
      const mine = of(stepKey(attempt, name, occurrence)).events;
      for (const [t, n] of pending) mine.set(t, (mine.get(t) ?? 0) + n);
      pending = new Map();
    } else if (type === "retrying" && typeof field(data, "step") === "string") {
      const key = stepKey(attempt, field(data, "step") as string, numberOr(field(data, "occurrence"), 0) ?? 0);
      of(key).retries.push({
        call: numberOr(field(data, "call"), 0) ?? 0,
        error: String(field(data, "error") ?? ""),
        waitS: numberOr(field(data, "waitS"), null),
        status: numberOr(field(data, "status"), null),
      });
    } else if (FAILURES.has(type)) {
      const error = field(data, "error");
      failures.push({
        kind: "failure",
        key: `failure-${event.seq}`,
        seq: event.seq,
        attempt: numberOr(field(data, "attempt"), attempt || null),
        type,
        error: typeof error === "string" ? error : null,
        at: event.at,
      });
    } else if (!MARKS.has(type)) {
      pending.set(type, (pending.get(type) ?? 0) + 1);
    }
  }
  return { observed, failures };
}

function durationOf(step: StepLike): number | null {
  if (!step.startedAt) return null;
  const ms = new Date(step.completedAt).getTime() - new Date(step.startedAt).getTime();
  return Number.isFinite(ms) && ms >= 0 ? ms : null;
}

/** The steps in completion order with their failures between them (by time), each with its events. */
export function stepRows(steps: readonly StepLike[], events: readonly EventLike[]): Row[] {
  const { observed, failures } = readTimeline(events);
  const rows: Row[] = [];
  let f = 0;
  for (const step of steps) {
    const done = new Date(step.completedAt).getTime();
    while (f < failures.length && new Date(failures[f]!.at).getTime() < done) rows.push(failures[f++]!);
    const seen = observed.get(stepKey(step.attempt, step.name, step.occurrence));
    rows.push({
      kind: "step",
      key: `step-${step.seq}`,
      step,
      durationMs: durationOf(step),
      events: [...(seen?.events ?? [])].map(([type, count]) => ({ type, count })),
      retries: seen?.retries ?? [],
    });
  }
  rows.push(...failures.slice(f));
  return rows;
}

/** The rows of `status` whose step name, error or event types hold `text` (any case). */
export function filterRows(rows: readonly Row[], status: StepStatus, text: string): Row[] {
  const wanted = text.trim().toLowerCase();
  return rows.filter((row) => {
    if (status === "failed" && row.kind !== "failure") return false;
    if (status === "retried" && (row.kind !== "step" || row.retries.length === 0)) return false;
    if (status === "usage" && (row.kind !== "step" || !row.step.usage)) return false;
    if (!wanted) return true;
    const words =
      row.kind === "step"
        ? [row.step.name, `#${row.step.occurrence}`, ...row.events.map((e) => e.type), ...row.retries.map((r) => r.error)]
        : [row.type, row.error ?? ""];
    return words.some((w) => w.toLowerCase().includes(wanted));
  });
}

/** Consecutive steps of one name (two or more) folded into a group; failures are never folded. */
export function foldRows(rows: readonly Row[]): Folded[] {
  const folded: Folded[] = [];
  let run: StepRow[] = [];
  const flush = () => {
    if (run.length >= 2) {
      const totalMs = run.reduce((sum, r) => sum + (r.durationMs ?? 0), 0);
      folded.push({ kind: "group", key: `group-${run[0]!.step.seq}`, name: run[0]!.step.name, rows: run, totalMs });
    } else folded.push(...run);
    run = [];
  };
  for (const row of rows) {
    if (row.kind === "step" && (run.length === 0 || run[0]!.step.name === row.step.name)) {
      run.push(row);
      continue;
    }
    flush();
    if (row.kind === "step") run.push(row);
    else folded.push(row);
  }
  flush();
  return folded;
}

export type Entry = { row: Folded; member: boolean };

/**
 * What is drawn, in order: each row, and an open group's members after it, up to `window` rows
 * of steps and failures (a group's own row is not counted); and how many there are in all.
 */
export function visibleEntries(
  folded: readonly Folded[],
  open: ReadonlySet<string>,
  window: number,
): { entries: Entry[]; total: number } {
  const entries: Entry[] = [];
  let counted = 0;
  let total = 0;
  for (const row of folded) {
    if (row.kind !== "group") {
      total += 1;
      if (counted < window) {
        entries.push({ row, member: false });
        counted += 1;
      }
      continue;
    }
    total += open.has(row.key) ? row.rows.length : 0;
    if (counted < window) entries.push({ row, member: false });
    if (!open.has(row.key)) continue;
    for (const member of row.rows) {
      if (counted >= window) break;
      entries.push({ row: member, member: true });
      counted += 1;
    }
  }
  return { entries, total };
}
