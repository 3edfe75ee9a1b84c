import { Link } from "../../app/router";
import { ACTIVE_STATUSES } from "../../api/types";
import { Json } from "../../ui/common";
import type { Waterfall } from "../../ui/waterfall";
import { SignalPanel } from "./Signal";
import type { DetailRun } from "./types";
import { whyLines } from "./why";
import { Words } from "./Words";

export function WhyPanel({ run, waterfall, now }: { run: DetailRun; waterfall: Waterfall; now: number }) {
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
    </section>
  );
}

/**
 * The Overview tab: why the run is here, the signal form while it is not settled, then its input
 * and output, all above the fold (the history is in the other tabs).
 */
export function Overview({ run, waterfall, now }: { run: DetailRun; waterfall: Waterfall; now: number }) {
  const active = ACTIVE_STATUSES.includes(run.status);
  return (
    <div className="panels">
      <WhyPanel run={run} waterfall={waterfall} now={now} />
      <SignalPanel run={run} />
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
