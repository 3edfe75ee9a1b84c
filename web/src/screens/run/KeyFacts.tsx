import { Link } from "../../app/router";
import { shortId } from "../../ui/format";
import type { DetailRun } from "./types";

/**
 * The run's key, its tags (each a link to the runs that share it) and, while it waits its turn
 * under ENQUEUE, the run just ahead of it: facts of the run page (docs/keys.md).
 */
export function KeyFacts({ run }: { run: DetailRun }) {
  return (
    <>
      <div>
        <dt>Key</dt>
        <dd data-testid="run-key">
          {run.key ? (
            <Link to={`/runs?key=${encodeURIComponent(run.key)}`} className="mono" title="Runs of this key">
              {run.key}
            </Link>
          ) : (
            <span className="muted">the agent's default</span>
          )}
        </dd>
      </div>
      <div>
        <dt>Tags</dt>
        <dd data-testid="run-tags">
          {run.tags.length === 0 ? (
            <span className="muted">none</span>
          ) : (
            <span className="key-tags">
              {run.tags.map((t) => (
                <Link key={t} to={`/runs?tag=${encodeURIComponent(t)}`} className="tag" title="Runs with this tag">
                  {t}
                </Link>
              ))}
            </span>
          )}
        </dd>
      </div>
      {run.queuedBehindId && (
        <div>
          <dt>Queued behind</dt>
          <dd data-testid="run-queued-behind">
            <Link to={`/runs/${run.queuedBehindId}`} className="mono" aria-label={`Run ${run.queuedBehindId}`}>
              {shortId(run.queuedBehindId)}
            </Link>
          </dd>
        </div>
      )}
    </>
  );
}
