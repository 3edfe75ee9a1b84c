import { describe, expect, it } from "vitest";
import {
  applyChunk,
  clearEnded,
  compareCursors,
  cursorMs,
  liveTexts,
  NO_OUTPUT,
  type OutputChunk,
  OutputFollow,
} from "./output";

const chunk = (cursor: string, text: string, done = false, stream = "answer"): OutputChunk => ({
  runId: "r",
  stream,
  cursor,
  text,
  done,
});

describe("cursors", () => {
  it("order by Redis's milliseconds, then the sequence number", () => {
    expect(compareCursors("1700000000000-1", "1700000000000-0")).toBeGreaterThan(0);
    expect(compareCursors("1700000000000-9", "1700000000001-0")).toBeLessThan(0);
    expect(compareCursors("5-5", "5-5")).toBe(0);
    expect(compareCursors("opaque", "5-5")).toBeNull();
    expect(cursorMs("1700000000123-4")).toBe(1700000000123);
    expect(cursorMs("opaque")).toBeNull();
  });
});

describe("a follow of one run's output", () => {
  it("hands on each chunk once, in order: one sent again after a reconnect is dropped", () => {
    const got: string[] = [];
    const follow = new OutputFollow("r", { next: (c) => got.push(c.text), complete: () => {}, error: () => {} });
    follow.take(chunk("10-0", "a"));
    follow.take(chunk("10-1", "b"));
    follow.take(chunk("10-1", "b")); // the same again
    follow.take(chunk("9-0", "old"));
    follow.take(chunk("11-0", "c"));
    expect(got).toEqual(["a", "b", "c"]);
    expect(follow.cursor).toBe("11-0");
  });

  it("resubscribes after the last chunk it handed on: the payload is read at each send", () => {
    const follow = new OutputFollow("r", { next: () => {}, complete: () => {}, error: () => {} });
    const payload = follow.payload;
    expect(JSON.parse(JSON.stringify(payload)).variables).toEqual({ id: "r", after: null });
    follow.take(chunk("12-3", "x"));
    expect(JSON.parse(JSON.stringify(payload)).variables).toEqual({ id: "r", after: "12-3" });
  });

  it("completes once and takes nothing after", () => {
    let completed = 0;
    const got: string[] = [];
    const follow = new OutputFollow("r", { next: (c) => got.push(c.text), complete: () => completed++, error: () => {} });
    follow.complete();
    follow.complete();
    follow.fail(new Error("late"));
    follow.take(chunk("1-0", "late"));
    expect([completed, got]).toEqual([1, []]);
  });
});

describe("the live text of the step in progress", () => {
  it("grows with each chunk, ends with done, and is cleared once its step's output is in", () => {
    let s = applyChunk(NO_OUTPUT, chunk("1-0", "turn 1: "));
    s = applyChunk(s, chunk("1-1", "abc"));
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: "turn 1: abc", ended: false }]);
    s = applyChunk(s, chunk("1-2", "", true));
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: "turn 1: abc", ended: true }]);
    expect(s.endings).toBe(1);
    expect(liveTexts(clearEnded(s, 1))).toEqual([]);
  });

  it("the next segment replaces an ended one at once; a later clear spares a newer ending", () => {
    let s = applyChunk(NO_OUTPUT, chunk("1-0", "one"));
    s = applyChunk(s, chunk("1-1", "", true));
    s = applyChunk(s, chunk("2-0", "two"));
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: "two", ended: false }]);
    s = applyChunk(s, chunk("2-1", "", true));
    expect(liveTexts(clearEnded(s, 1))).toEqual([{ stream: "answer", text: "two", ended: true }]);
  });

  it("keeps named streams apart", () => {
    let s = applyChunk(NO_OUTPUT, chunk("1-0", "a", false, "answer"));
    s = applyChunk(s, chunk("1-1", "t", false, "thinking"));
    s = applyChunk(s, chunk("1-2", "b", false, "answer"));
    expect(liveTexts(s).map((t) => [t.stream, t.text])).toEqual([
      ["answer", "ab"],
      ["thinking", "t"],
    ]);
    expect(s.cursor).toBe("1-2");
  });

  it("drops what an abandoned attempt showed at a reset: a reply killed mid-way is not shown twice", () => {
    const dead = "The refund of 42.00 for ord";
    const reply = "The refund of 42.00 for order A-1 is done.";
    let s = applyChunk(NO_OUTPUT, { ...chunk("1-0", dead), attempt: 1, kind: "text" });
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: dead, ended: false }]);
    s = applyChunk(s, { ...chunk("2-0", ""), attempt: 2, reset: true });
    s = applyChunk(s, { ...chunk("2-1", reply.slice(0, 20)), attempt: 2, kind: "text" });
    s = applyChunk(s, { ...chunk("2-2", reply.slice(20)), attempt: 2, kind: "text" });
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: reply, ended: false }]);
    s = applyChunk(s, { ...chunk("2-3", "", true), attempt: 2 });
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: reply, ended: true }]);
  });

  it("shows the reply and the structured output, not the tool call and result lines", () => {
    let s = applyChunk(NO_OUTPUT, { ...chunk("1-0", "Looking it up. "), kind: "text" });
    s = applyChunk(s, { ...chunk("1-1", '{"id":"c1","tool":"lookup","args":{}}\n'), kind: "tool_call" });
    s = applyChunk(s, { ...chunk("1-2", '{"id":"c1","outcome":"return"}\n'), kind: "tool_result" });
    s = applyChunk(s, { ...chunk("1-3", '{"refunded": tr'), kind: "output" });
    s = applyChunk(s, { ...chunk("1-4", "ue}"), kind: "output" });
    expect(liveTexts(s)).toEqual([{ stream: "answer", text: 'Looking it up. {"refunded": true}', ended: false }]);
  });
});
