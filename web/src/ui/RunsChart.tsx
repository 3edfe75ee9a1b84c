import { useMemo } from "react";
import type { UsageDay } from "../api/types";
import { buildChart, CHART_ORDER, describeBar } from "./runsChart";

/** Runs per UTC day as stacked bars (inline SVG; no chart library). */
export function RunsChart({ usage, days, today = new Date() }: { usage: readonly UsageDay[]; days: number; today?: Date }) {
  const chart = useMemo(() => buildChart(usage, today, days), [usage, today, days]);
  const left = chart.bars[0]?.x ?? 0;
  return (
    <figure className="chart">
      <svg
        viewBox={`0 0 ${chart.width} ${chart.height}`}
        role="img"
        aria-labelledby="runs-chart-title"
        data-testid="runs-chart"
      >
        <title id="runs-chart-title">Runs per day, last {days} days</title>
        {chart.ticks.map((t) => {
          const y = chart.plotBottom - (t / chart.max) * (chart.plotBottom - chart.plotTop);
          return (
            <g key={t} className="chart-grid">
              <line x1={left - 4} x2={chart.width} y1={y} y2={y} />
              <text x={left - 8} y={y + 4} textAnchor="end">
                {t}
              </text>
            </g>
          );
        })}
        {chart.bars.map((bar) => (
          <g key={bar.day} data-day={bar.day} data-total={bar.total}>
            <title>{describeBar(bar)}</title>
            {bar.segments.map((s) => (
              <rect
                key={s.status}
                className={`chart-${s.status.toLowerCase()}`}
                x={bar.x}
                y={s.y}
                width={bar.width}
                height={Math.max(0.5, s.height)}
                rx={1.5}
              />
            ))}
          </g>
        ))}
        {chart.labels.map((l) => (
          <text key={l.text} className="chart-label" x={l.x} y={chart.height - 6} textAnchor="middle">
            {l.text}
          </text>
        ))}
      </svg>
      <figcaption className="chart-legend">
        {CHART_ORDER.map((s) => (
          <span key={s}>
            <i className={`swatch chart-${s.toLowerCase()}`} aria-hidden="true" /> {s.charAt(0) + s.slice(1).toLowerCase()}
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
