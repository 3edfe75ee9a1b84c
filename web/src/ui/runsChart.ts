import type { RunStatus, UsageDay } from "../api/types";

/** The geometry of the Usage screen's chart: one stacked bar per UTC day of the period (days
 * without runs included, so gaps show), split by status. Pure, so it is tested without a DOM. */

export const CHART_ORDER: readonly RunStatus[] = ["SUCCEEDED", "FAILED", "CANCELLED", "RUNNING", "WAITING", "QUEUED"];

export interface Segment {
  status: RunStatus;
  count: number;
  y: number;
  height: number;
}

export interface Bar {
  day: string;
  total: number;
  x: number;
  width: number;
  segments: Segment[];
}

export interface Chart {
  width: number;
  height: number;
  plotTop: number;
  plotBottom: number;
  max: number;
  ticks: number[];
  bars: Bar[];
  labels: { x: number; text: string }[];
}

export interface ChartSize {
  width: number;
  height: number;
  left: number;
  right: number;
  bottom: number;
  top: number;
}

export const DEFAULT_SIZE: ChartSize = { width: 760, height: 200, left: 40, right: 20, bottom: 24, top: 8 };

/** YYYY-MM-DD of each UTC day from `today - (days - 1)` to `today`. */
export function dayRange(today: Date, days: number): string[] {
  const end = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate());
  return Array.from({ length: days }, (_, i) =>
    new Date(end - (days - 1 - i) * 86_400_000).toISOString().slice(0, 10),
  );
}

/** A round axis maximum at or above `n` (1, 2, 5 × 10^k) and its ticks. */
export function niceMax(n: number): { max: number; ticks: number[] } {
  if (n <= 0) return { max: 1, ticks: [0, 1] };
  const power = 10 ** Math.floor(Math.log10(n));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= n / 4) ?? 10 * power;
  const max = Math.ceil(n / step) * step;
  const ticks: number[] = [];
  for (let t = 0; t <= max; t += step) ticks.push(t);
  return { max, ticks };
}

export function buildChart(
  usage: readonly UsageDay[],
  today: Date,
  days: number,
  size: ChartSize = DEFAULT_SIZE,
): Chart {
  const perDay = new Map<string, Map<RunStatus, number>>();
  for (const u of usage) {
    const row = perDay.get(u.day) ?? new Map<RunStatus, number>();
    row.set(u.status, (row.get(u.status) ?? 0) + u.count);
    perDay.set(u.day, row);
  }
  const range = dayRange(today, days);
  const totals = range.map((d) => [...(perDay.get(d)?.values() ?? [])].reduce((a, b) => a + b, 0));
  const { max, ticks } = niceMax(Math.max(0, ...totals));
  const plotTop = size.top;
  const plotBottom = size.height - size.bottom;
  const plotHeight = plotBottom - plotTop;
  const slot = (size.width - size.left - size.right) / range.length;
  const width = Math.max(1, slot * 0.75);
  const bars = range.map((day, i) => {
    const counts = perDay.get(day);
    let y = plotBottom;
    const segments: Segment[] = [];
    for (const status of CHART_ORDER) {
      const count = counts?.get(status) ?? 0;
      if (!count) continue;
      const height = (count / max) * plotHeight;
      y -= height;
      segments.push({ status, count, y, height });
    }
    return { day, total: totals[i] ?? 0, x: size.left + i * slot + (slot - width) / 2, width, segments };
  });
  const every = Math.max(1, Math.ceil(range.length / 8));
  const labels = range
    .map((day, i) => ({ i, day }))
    .filter(({ i }) => (range.length - 1 - i) % every === 0)
    .map(({ i, day }) => ({ x: size.left + i * slot + slot / 2, text: day.slice(5) }));
  return { width: size.width, height: size.height, plotTop, plotBottom, max, ticks, bars, labels };
}

/** "2026-12-03: 12 runs (10 succeeded, 2 failed)" */
export function describeBar(bar: Bar): string {
  const parts = bar.segments.map((s) => `${s.count} ${s.status.toLowerCase()}`);
  const runs = `${bar.total} run${bar.total === 1 ? "" : "s"}`;
  return parts.length ? `${bar.day}: ${runs} (${parts.join(", ")})` : `${bar.day}: no runs`;
}
