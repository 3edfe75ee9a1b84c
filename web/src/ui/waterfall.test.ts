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

  it("a run never claimed has no bands and no queue time", () => {
    const w = buildWaterfall([], { createdAt: T0, finishedAt: null }, Date.parse(T0) + 10);
    expect(w).toEqual({ queued: null, bands: [], span: 10 });
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
