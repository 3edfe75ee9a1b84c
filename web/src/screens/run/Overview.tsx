import { Link } from "../../app/router";
import { ACTIVE_STATUSES } from "../../api/types";
import { Json } from "../../ui/common";
import { formatTime } from "../../ui/format";
import { LiveOutputPanel } from "./LiveOutput";
import type { TimelineEvent, Waterfall } from "../../ui/waterfall";
import { SignalPanel } from "./Signal";
import type { DetailRun } from "./types";
import { RetriedAs } from "./RetriedAs";
import { whyLines } from "./why";
import { Words } from "../../ui/Words";

export function WhyPanel({ run, waterfall, now }: { run: DetailRun; waterfall: Waterfall | null; now: number }) {
  const lines = whyLines(run, waterfall, now);
  return (
    <section className="panel" aria-labelledby="why-heading">
      <h2 id="why-heading">Why it is here</h2>
      <ul className="why" aria-label="Why it is here">
        {lines.map((line) => (
          <li key={line}>
            <Words text={line} />
          </li>
        ))}
      </ul>
      {run.retriedFromId && (
        <p className="small">
          <Link to={`/runs/${run.retriedFromId}`}>Open the run it retries</Link>
        </p>
      )}
      <RetriedAs ids={run.retriedAsIds ?? []} />
    </section>
  );
}

/**
 * The Overview tab: what it is writing while it is live, why the run is here, the signal form
 * while it is not settled, then its input and output, all above the fold (the history is in the
 * other tabs).
 */
export function Overview({
  run,
  waterfall,
  now,
  events,
}: {
  run: DetailRun;
  waterfall: Waterfall | null;
  now: number;
  events: readonly TimelineEvent[];
}) {
  const active = ACTIVE_STATUSES.includes(run.status);
  return (
    <div className="panels">
      {active && <LiveOutputPanel id={run.id} />}
      <WhyPanel run={run} waterfall={waterfall} now={now} />
      <SignalPanel run={run} />
      <SignalsReceived events={events} />
      <div className="columns">
        <div>
          <h2>Input</h2>
          <Json value={run.input} label="Input" />
        </div>
        <div>
          <h2>Output</h2>
          {run.output === null ? <p className="muted">{active ? "Not yet." : "None."}</p> : <Json value={run.output} label="Output" />}
        </div>
      </div>
    </div>
  );
}

/** The signals the run received, from its timeline: name, payload and who sent it (the audit trail). */
function SignalsReceived({ events }: { events: readonly TimelineEvent[] }) {
  const signals = events.filter((e) => e.type === "signal");
  if (signals.length === 0) return null;
  return (
    <section className="panel" aria-labelledby="signals-heading">
      <h2 id="signals-heading">Signals received</h2>
      <table className="table" aria-label="Signals received">
        <thead>
          <tr>
            <th scope="col">Signal</th>
            <th scope="col">Payload</th>
            <th scope="col">Sent by</th>
            <th scope="col">At</th>
          </tr>
        </thead>
        <tbody>
          {signals.map((e) => {
            const data = (e.data ?? {}) as { name?: string; payload?: unknown; by?: string | null };
            return (
              <tr key={e.seq} data-testid="signal-received">
                <td>
                  <code>{data.name}</code>
                </td>
                <td className="mono small">{"payload" in data ? JSON.stringify(data.payload) : <span className="muted">not recorded</span>}</td>
                <td>{data.by ?? <span className="muted">unknown</span>}</td>
                <td>
                  <time dateTime={e.at} title={e.at}>
                    {formatTime(e.at)}
                  </time>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}
