import { useState } from "react";
import { Link } from "../../app/router";
import { type ChildBar, childBars, type ChildLike } from "../../ui/childBars";
import { JsonDetails, StatusBadge } from "../../ui/common";
import { formatTime } from "../../ui/format";
import { type Band, END_WORDS, formatMs, RESUMED_WORDS, type TimelineEvent, type WaitBand, type Waterfall } from "../../ui/waterfall";
import { childLabel } from "./tree";
import { Words } from "../../ui/Words";

/** A page of the run's children (oldest first) and how many it has in all. */
export interface Kids {
  runs: readonly ChildLike[];
  total: number;
  now: number;
}

function pct(value: number, span: number): string {
  return `${Math.min(100, Math.max(0, (value / span) * 100)).toFixed(3)}%`;
}

function Bar({ offset, duration, span, className, alive }: { offset: number; duration: number; span: number; className: string; alive?: number | null }) {
  const width = Math.max((duration / span) * 100, 0.6);
  const aliveShare = alive != null && duration > 0 ? Math.min(100, (alive / duration) * 100) : null;
  return (
    <div className="track" aria-hidden="true">
      <div
        className={`bar-band ${className}`}
        style={{
          left: pct(offset, span),
          width: `${Math.min(width, 100)}%`,
          ...(aliveShare !== null ? { ["--alive" as string]: `${aliveShare}%` } : {}),
        }}
      />
    </div>
  );
}

function BandRow({ band, span, kids, total }: { band: Band; span: number; kids: ChildBar[]; total: number }) {
  return (
    <li className={`band band-${band.end}`} data-attempt={band.attempt} data-end={band.end}>
      <div className="band-head">
        <span className="band-name">Attempt {band.attempt}</span>
        <span className={`badge badge-end-${band.end}`}>{END_WORDS[band.end]}</span>
        <span className="muted small">
          +{formatMs(band.offset)} · {formatMs(band.duration)}
          {band.alive !== null && ` (silent after ${formatMs(band.alive)})`}
        </span>
      </div>
      <Bar offset={band.offset} duration={band.duration} span={span} className={`bar-${band.end}`} alive={band.alive} />
      {band.segments.length > 0 && <Segments band={band} span={span} />}
      {kids.length > 0 && <ChildRows attempt={band.attempt} bars={kids} total={total} span={span} />}
      {band.endData !== null && band.end !== "succeeded" && <JsonDetails value={band.endData} label={`Attempt ${band.attempt} end`} />}
    </li>
  );
}

function WaitRow({ wait, span }: { wait: WaitBand; span: number }) {
  const what = wait.for ? `Waiting for \`${wait.for}\`` : "Sleeping";
  const end = wait.by === null ? "still waiting" : (RESUMED_WORDS[wait.by] ?? wait.by);
  return (
    <li className="band band-wait" data-end="wait" data-by={wait.by ?? ""}>
      <div className="band-head">
        <span className="band-name">
          <Words text={what} />
        </span>
        <span className="badge badge-waiting">{end}</span>
        <span className="muted small">
          +{formatMs(wait.offset)} · {formatMs(wait.duration)}
          {wait.until && ` · until ${formatTime(wait.until)}`}
          {wait.signals.length > 0 && ` · signal ${wait.signals.join(", ")}`}
        </span>
      </div>
      <Bar offset={wait.offset} duration={wait.duration} span={span} className="bar-wait" />
    </li>
  );
}

const STATUS_BARS: Record<string, string> = {
  QUEUED: "bar-queued",
  RUNNING: "bar-running",
  WAITING: "bar-waiting",
  SUCCEEDED: "bar-succeeded",
  FAILED: "bar-failed",
  CANCELLED: "bar-cancelled",
};

/** Under the attempt that started them: each child a bar, queued (its first part) then its own. */
function ChildRows({ attempt, bars, total, span }: { attempt: number; bars: ChildBar[]; total: number; span: number }) {
  return (
    <ol className="child-bars" aria-label={`Children started by attempt ${attempt}`}>
      {bars.map(({ child, position, offset, queued, duration }) => (
        <li key={child.id} className="child-bar" data-child-id={child.id} data-status={child.status}>
          <div className="band-head">
            <Link to={`/runs/${child.id}?tab=waterfall`} aria-label={`${childLabel(position, total)}, run ${child.id}`}>
              {childLabel(position, total)}
            </Link>
            <StatusBadge status={child.status} />
            <span className="muted small">
              {child.agent} · +{formatMs(offset)} · {formatMs(duration)}
              {queued !== null && queued > 0 && ` (queued ${formatMs(queued)})`}
            </span>
          </div>
          <div className="track" aria-hidden="true">
            <div className="bar-band bar-queued" style={{ left: pct(offset, span), width: pct(queued ?? duration, span) }} />
            {queued !== null && (
              <div
                className={`bar-band ${STATUS_BARS[child.status] ?? "bar-running"}`}
                style={{ left: pct(offset + queued, span), width: pct(Math.max(duration - queued, span / 200), span) }}
              />
            )}
          </div>
        </li>
      ))}
    </ol>
  );
}

export function WaterfallPanel({
  waterfall,
  events,
  run,
  kids,
}: {
  waterfall: Waterfall | null;
  events: readonly TimelineEvent[];
  run?: { id: string; createdAt: string };
  kids?: Kids;
}) {
  if (waterfall === null) {
    return (
      <section className="panel" aria-labelledby="waterfall-heading">
        <h2 id="waterfall-heading">Waterfall</h2>
        <p className="note note-muted" role="status" aria-busy="true" data-testid="timeline-reading">
          Reading the whole timeline ({events.length} events so far): the waterfall is drawn once it is all in.
        </p>
      </section>
    );
  }
  const bars = run && kids ? childBars(kids.runs, run, waterfall.bands, kids.now) : new Map<Band, ChildBar[]>();
  const total = kids?.total ?? 0;
  return (
    <section className="panel" aria-labelledby="waterfall-heading">
      <h2 id="waterfall-heading">
        Waterfall <span className="muted small">({formatMs(waterfall.span)} from creation)</span>
      </h2>
      {events.length === 0 && waterfall.bands.length === 0 ? (
        <p className="muted">Not claimed yet.</p>
      ) : (
        <ol className="waterfall" aria-label="Waterfall">
          {waterfall.queued !== null && (
            <li className="band band-queued" data-end="queued">
              <div className="band-head">
                <span className="band-name">Queued</span>
                <span className="muted small">+0 ms · {formatMs(waterfall.queued)}</span>
              </div>
              <Bar offset={0} duration={waterfall.queued} span={waterfall.span} className="bar-queued" />
            </li>
          )}
          {[
            ...waterfall.bands.map((band) => ({ at: band.offset, order: 0, band, wait: null })),
            ...waterfall.waits.map((wait) => ({ at: wait.offset, order: 1, band: null, wait })),
          ]
            .sort((a, b) => a.at - b.at || a.order - b.order)
            .map((row) =>
              row.band ? (
                <BandRow
                  key={`a-${row.band.attempt}-${row.band.offset}`}
                  band={row.band}
                  span={waterfall.span}
                  kids={bars.get(row.band) ?? []}
                  total={total}
                />
              ) : (
                <WaitRow key={`w-${row.wait!.seq}`} wait={row.wait!} span={waterfall.span} />
              ),
            )}
        </ol>
      )}
      {run && kids && kids.runs.length < total && (
        <p className="muted small">
          The first {kids.runs.length} of {total} children are drawn; the <Link to={`/runs/${run.id}?tab=tree`}>Tree</Link> tab lists them all.
        </p>
      )}
    </section>
  );
}


/** Segments open by themselves up to this many; a longer attempt folds (and draws nothing until opened). */
export const SEGMENTS_OPEN = 12;

function Segments({ band, span }: { band: Band; span: number }) {
  const [open, setOpen] = useState(band.segments.length <= SEGMENTS_OPEN);
  const steps = band.segments.filter((seg) => seg.type === "step").length;
  return (
    <details className="segments-fold" open={open} onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>
        {band.segments.length} segment(s){steps > 0 && `, ${steps} durable step(s)`}
      </summary>
      {open && (
        <ol className="segments" aria-label={`Attempt ${band.attempt} turns`}>
          {band.segments.map((seg) => (
            <li key={seg.seq} className={`segment segment-${seg.type}`} data-seq={seg.seq}>
              <div className="band-head">
                <span>{seg.label}</span>
                <span className="muted small">
                  +{formatMs(seg.offset)} · {formatMs(seg.duration)}
                </span>
              </div>
              <Bar offset={seg.offset} duration={seg.duration} span={span} className={seg.type === "step" ? "bar-step" : "bar-segment"} />
              <JsonDetails value={seg.data} label={`${seg.label} data`} />
            </li>
          ))}
        </ol>
      )}
    </details>
  );
}
