import { describe, expect, it } from "vitest";
import { formatRelative } from "./format";
import { buildWaterfall, formatMs } from "./waterfall";

const T0 = "2026-01-01T00:00:00.000Z";
const at = (ms: number) => new Date(Date.parse(T0) + ms).toISOString();

describe("buildWaterfall", () => {
  it("a lost attempt, then one that succeeds: two bands with turns, offsets and durations", () => {
    const events = [
      { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(100) },
      { seq: 2, type: "turn", data: { turn: 1 }, at: at(600) },
      { seq: 3, type: "lost", data: { attempt: 1, reason: "lease expired" }, at: at(5000) },
      { seq: 4, type: "claimed", data: { attempt: 2 }, at: at(5000) },
      { seq: 5, type: "turn", data: { turn: 2 }, at: at(5400) },
      { seq: 6, type: "succeeded", data: {}, at: at(5500) },
    ];
    const w = buildWaterfall(events, { createdAt: T0, finishedAt: at(5500) });
    expect(w.queued).toBe(100);
    expect(w.bands.map((b) => [b.attempt, b.end, b.offset, b.duration, b.alive])).toEqual([
      [1, "lost", 100, 4900, 500],
      [2, "succeeded", 5000, 500, null],
    ]);
    expect(w.bands[0]!.segments.map((s) => [s.label, s.offset, s.duration])).toEqual([["turn 1", 100, 500]]);
    expect(w.bands[1]!.segments.map((s) => [s.label, s.offset, s.duration])).toEqual([["turn 2", 5000, 400]]);
    expect(w.span).toBe(5500);
  });

  it("a retryable fault ends its band as retrying; an open attempt runs until now", () => {
    const events = [
      { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(0) },
      { seq: 2, type: "retrying", data: { delayS: 0.2, error: "flaky" }, at: at(50) },
      { seq: 3, type: "claimed", data: { attempt: 2 }, at: at(300) },
      { seq: 4, type: "cancel_requested", data: {}, at: at(350) },
    ];
    const w = buildWaterfall(events, { createdAt: T0, finishedAt: null }, Date.parse(T0) + 1000);
    expect(w.bands.map((b) => [b.end, b.duration])).toEqual([
      ["retrying", 50],
      ["running", 700],
    ]);
    expect(w.bands[0]!.endData).toEqual({ delayS: 0.2, error: "flaky" });
    expect(w.bands[1]!.segments).toEqual([]); // an instant, not work
  });

  it("a step's call made again is a segment of its attempt, not the attempt's end", () => {
    const events = [
      { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(0) },
      { seq: 2, type: "retrying", data: { step: "turn", occurrence: 1, call: 1, error: "503" }, at: at(40) },
      { seq: 3, type: "step", data: { name: "turn", occurrence: 1 }, at: at(90) },
      { seq: 4, type: "succeeded", data: {}, at: at(100) },
    ];
    const w = buildWaterfall(events, { createdAt: T0, finishedAt: at(100) });
    expect(w.bands.map((b) => [b.attempt, b.end, b.duration])).toEqual([[1, "succeeded", 100]]);
    expect(w.bands[0]!.segments.map((s) => [s.label, s.type])).toEqual([
      ["call of turn retried", "retrying"],
      ["step turn #1", "step"],
    ]);
  });

  it("a run never claimed has no bands and no queue time", () => {
    const w = buildWaterfall([], { createdAt: T0, finishedAt: null }, Date.parse(T0) + 10);
    expect(w).toEqual({ queued: null, bands: [], waits: [], span: 10 });
  });

  it("a durable sleep ends its attempt as parked and is a band from `waiting` to `resumed`", () => {
    const events = [
      { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(100) },
      { seq: 2, type: "turn", data: { turn: 1 }, at: at(300) },
      { seq: 3, type: "step", data: { name: "turn", occurrence: 0 }, at: at(300) },
      { seq: 4, type: "waiting", data: { for: null, until: at(5300) }, at: at(300) },
      { seq: 5, type: "resumed", data: { by: "timer" }, at: at(5400) },
      { seq: 6, type: "claimed", data: { attempt: 2 }, at: at(5500) },
      { seq: 7, type: "turn", data: { turn: 2 }, at: at(5700) },
      { seq: 8, type: "step", data: { name: "turn", occurrence: 1 }, at: at(5700) },
      { seq: 9, type: "succeeded", data: {}, at: at(5800) },
    ];
    const w = buildWaterfall(events, { createdAt: T0, finishedAt: at(5800) });
    expect(w.bands.map((b) => [b.attempt, b.end, b.offset, b.duration])).toEqual([
      [1, "waiting", 100, 200],
      [2, "succeeded", 5500, 300],
    ]);
    expect(w.waits).toEqual([
      { seq: 4, for: null, until: at(5300), offset: 300, duration: 5100, by: "timer", signals: [] },
    ]);
    // a step is a segment from the claim (or the previous step) to its commit
    expect(w.bands[1]!.segments.map((s) => [s.type, s.label, s.offset, s.duration])).toEqual([
      ["turn", "turn 2", 5500, 200],
      ["step", "step turn #1", 5500, 200],
    ]);
    expect(w.span).toBe(5800);
  });

  it("a wait for a signal notes the signal and its `by`; one still waiting runs until now", () => {
    const events = [
      { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(0) },
      { seq: 2, type: "waiting", data: { for: "approval", until: at(60_000) }, at: at(100) },
      { seq: 3, type: "signal", data: { name: "approval" }, at: at(2000) },
      { seq: 4, type: "resumed", data: { by: "signal" }, at: at(2000) },
      { seq: 5, type: "claimed", data: { attempt: 2 }, at: at(2100) },
      { seq: 6, type: "waiting", data: { for: "again", until: null }, at: at(2200) },
    ];
    const w = buildWaterfall(events, { createdAt: T0, finishedAt: null }, Date.parse(T0) + 3000);
    expect(w.waits.map((x) => [x.for, x.offset, x.duration, x.by, x.signals])).toEqual([
      ["approval", 100, 1900, "signal", ["approval"]],
      ["again", 2200, 800, null, []],
    ]);
    expect(w.bands.map((b) => b.end)).toEqual(["waiting", "waiting"]);
  });

  it("a run cancelled while it waits closes the wait with the settle", () => {
    const events = [
      { seq: 1, type: "claimed", data: { attempt: 1 }, at: at(0) },
      { seq: 2, type: "waiting", data: { for: null, until: at(99_000) }, at: at(10) },
      { seq: 3, type: "cancelled", data: {}, at: at(500) },
    ];
    const w = buildWaterfall(events, { createdAt: T0, finishedAt: at(500) });
    expect(w.waits.map((x) => [x.by, x.duration])).toEqual([["cancelled", 490]]);
    expect(w.bands.map((b) => b.end)).toEqual(["waiting"]);
  });
});

describe("formatMs", () => {
  it("reads as a person would", () => {
    expect(formatMs(340)).toBe("340 ms");
    expect(formatMs(1234)).toBe("1.2 s");
    expect(formatMs(125_000)).toBe("2 min 5 s");
    expect(formatMs(3_780_000)).toBe("1 h 3 min");
  });
});

describe("formatRelative", () => {
  const now = Date.parse(T0);
  it("says how long ago or how soon", () => {
    expect(formatRelative(at(-300), now)).toBe("just now");
    expect(formatRelative(at(-3_000), now)).toBe("3 s ago");
    expect(formatRelative(at(2_000), now)).toBe("in 2 s");
    expect(formatRelative(at(-180_000), now)).toBe("3 min ago");
    expect(formatRelative(at(-2 * 86_400_000), now)).toBe("2 d ago");
    expect(formatRelative(null, now)).toBe("—");
  });
});
