import { describe, expect, it } from "vitest";
import { type EventLike, filterRows, foldRows, type StepLike, stepRows, visibleEntries } from "./stepRows";

const at = (s: number) => new Date(Date.UTC(2026, 11, 6, 12, 0, s)).toISOString();

function step(seq: number, name: string, occurrence: number, attempt: number, start: number, end: number): StepLike {
  return { seq, name, occurrence, attempt, startedAt: at(start), completedAt: at(end), usage: null };
}

// Attempt 1: plan, then turn #1 (two turn events, a call retried once), then it fails and is
// retried; attempt 2 replays them and records turn #2 and turn #3, then report.
const events: EventLike[] = [
  { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(0) },
  { seq: 2, type: "step", data: { name: "plan", occurrence: 1 }, at: at(1) },
  { seq: 3, type: "retrying", data: { step: "turn", occurrence: 1, call: 1, error: "Boom", waitS: 0.5, status: 503 }, at: at(2) },
  { seq: 4, type: "turn", data: { turn: 1 }, at: at(3) },
  { seq: 5, type: "turn", data: { turn: 1 }, at: at(3) },
  { seq: 6, type: "step", data: { name: "turn", occurrence: 1 }, at: at(3) },
  { seq: 7, type: "retrying", data: { attempt: 1, error: "Lost the model", delayS: 1 }, at: at(4) },
  { seq: 8, type: "claimed", data: { attempt: 2 }, at: at(5) },
  { seq: 9, type: "message", data: {}, at: at(6) },
  { seq: 10, type: "step", data: { name: "turn", occurrence: 2 }, at: at(6) },
  { seq: 11, type: "step", data: { name: "turn", occurrence: 3 }, at: at(8) },
  { seq: 12, type: "step", data: { name: "report", occurrence: 1 }, at: at(9) },
  { seq: 13, type: "succeeded", data: {}, at: at(9) },
];
const steps = [
  step(1, "plan", 1, 1, 0, 1),
  step(2, "turn", 1, 1, 1, 3),
  step(3, "turn", 2, 2, 5, 6),
  step(4, "turn", 3, 2, 6, 8),
  { ...step(5, "report", 1, 2, 8, 9), usage: { requests: 1, inputTokens: 10, outputTokens: 5 } },
];

describe("the Steps tab's rows", () => {
  const rows = stepRows(steps, events);

  it("folds each step's events and retried calls into its row, and puts failures where they happened", () => {
    expect(rows.map((r) => (r.kind === "step" ? `${r.step.name}#${r.step.occurrence}` : r.type))).toEqual([
      "plan#1",
      "turn#1",
      "retrying",
      "turn#2",
      "turn#3",
      "report#1",
    ]);
    const turn1 = rows[1]!;
    expect(turn1.kind === "step" && turn1.events).toEqual([{ type: "turn", count: 2 }]);
    expect(turn1.kind === "step" && turn1.retries).toEqual([{ call: 1, error: "Boom", waitS: 0.5, status: 503 }]);
    expect(turn1.kind === "step" && turn1.durationMs).toBe(2000);
    const turn2 = rows[3]!;
    expect(turn2.kind === "step" && turn2.events).toEqual([{ type: "message", count: 1 }]);
    const failure = rows[2]!;
    expect(failure.kind === "failure" && [failure.attempt, failure.error]).toEqual([1, "Lost the model"]);
  });

  it("filters by status and by text", () => {
    expect(filterRows(rows, "failed", "").map((r) => r.key)).toEqual(["failure-7"]);
    expect(filterRows(rows, "retried", "").map((r) => r.key)).toEqual(["step-2"]);
    expect(filterRows(rows, "usage", "").map((r) => r.key)).toEqual(["step-5"]);
    expect(filterRows(rows, "all", "REPO").map((r) => r.key)).toEqual(["step-5"]);
    expect(filterRows(rows, "all", "boom").map((r) => r.key)).toEqual(["step-2"]);
    expect(filterRows(rows, "all", "model").map((r) => r.key)).toEqual(["failure-7"]);
  });

  it("folds consecutive calls of one step with their count and total time, never across a failure", () => {
    const folded = foldRows(rows);
    expect(folded.map((r) => (r.kind === "group" ? `${r.name}×${r.rows.length}/${r.totalMs}` : r.key))).toEqual([
      "step-1",
      "step-2",
      "failure-7",
      "turn×2/3000",
      "step-5",
    ]);
  });

  it("draws a window of rows: a group's own row is not counted, an open group's members are", () => {
    const folded = foldRows(rows);
    const closed = visibleEntries(folded, new Set(), 10);
    expect(closed.entries).toHaveLength(5);
    expect(closed.total).toBe(4);
    const open = visibleEntries(folded, new Set(["group-3"]), 4);
    expect(open.entries.map((e) => `${e.row.key}${e.member ? "*" : ""}`)).toEqual([
      "step-1",
      "step-2",
      "failure-7",
      "group-3",
      "step-3*",
    ]);
    expect(open.total).toBe(6);
  });
});
