import { describe, expect, it } from "vitest";
import type { UsageDay } from "../api/types";
import { buildChart, dayRange, describeBar, niceMax } from "./runsChart";

const today = new Date("2026-12-03T15:00:00Z");

describe("the runs-per-day chart", () => {
  it("has a bar for every UTC day of the period, empty days included", () => {
    expect(dayRange(today, 3)).toEqual(["2026-12-01", "2026-12-02", "2026-12-03"]);
    const chart = buildChart([], today, 7);
    expect(chart.bars.map((b) => b.day)).toEqual(dayRange(today, 7));
    expect(chart.bars.every((b) => b.total === 0 && b.segments.length === 0)).toBe(true);
  });

  it("stacks each day's statuses, tallest day against a round maximum", () => {
    const usage: UsageDay[] = [
      { day: "2026-12-02", agent: "demo", status: "SUCCEEDED", count: 6 },
      { day: "2026-12-02", agent: "llm", status: "SUCCEEDED", count: 2 },
      { day: "2026-12-02", agent: "demo", status: "FAILED", count: 1 },
      { day: "2026-12-03", agent: "demo", status: "CANCELLED", count: 3 },
    ];
    const chart = buildChart(usage, today, 3);
    const [, busy, last] = chart.bars;
    if (!busy || !last || !chart.bars[0]) throw new Error("three bars expected");
    expect(busy.total).toBe(9);
    expect(busy.segments.map((s) => [s.status, s.count])).toEqual([
      ["SUCCEEDED", 8],
      ["FAILED", 1],
    ]);
    expect(chart.max).toBe(10);
    const plot = chart.plotBottom - chart.plotTop;
    const [ok, failed] = busy.segments;
    if (!ok || !failed) throw new Error("two segments expected");
    expect(ok.height).toBeCloseTo((8 / 10) * plot);
    expect(failed.y + failed.height).toBeCloseTo(ok.y); // stacked
    expect(last.segments).toHaveLength(1);
    expect(describeBar(busy)).toBe("2026-12-02: 9 runs (8 succeeded, 1 failed)");
    expect(describeBar(chart.bars[0])).toBe("2026-12-01: no runs");
  });

  it("rounds the axis to 1, 2 or 5 times a power of ten", () => {
    expect(niceMax(0)).toEqual({ max: 1, ticks: [0, 1] });
    expect(niceMax(7).max).toBe(8);
    expect(niceMax(230)).toEqual({ max: 300, ticks: [0, 100, 200, 300] });
    expect(niceMax(1000).ticks.at(-1)).toBe(1000);
  });

  it("labels at most about eight days, always the last one", () => {
    const chart = buildChart([], today, 30);
    expect(chart.labels.length).toBeLessThanOrEqual(8);
    expect(chart.labels.at(-1)?.text).toBe("12-03");
  });
});
