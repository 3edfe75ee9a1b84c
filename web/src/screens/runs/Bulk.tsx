import { useMutation } from "@apollo/client/react";
import { type RefObject, useEffect, useRef, useState } from "react";
import { CANCEL_RUN, RETRY_RUN } from "../../api/documents/runs";
import { describeError } from "../../api/errors";
import { Link } from "../../app/router";
import { shortId } from "../../ui/format";
import { BULK, type BulkAction, planBulk, runsWord, type Ticked } from "./bulkPlan";

export type { Ticked } from "./bulkPlan";

interface Outcome {
  id: string;
  ok: boolean;
  /** the new run of a retry or replay (or the agent's active run it came back with) */
  runId?: string;
  created?: boolean;
  error?: string;
}

/**
 * The bar over ticked rows: how many are ticked, Cancel, Retry from where it failed and Replay.
 * Each action says first how many runs it will touch (and how many it leaves alone, with why),
 * asks, then goes through them one by one with the existing mutations and reports each failure
 * by run. Focus moves to the question, then to the report.
 */
export function BulkBar({ ticked, clear }: { ticked: readonly Ticked[]; clear: () => void }) {
  const [asking, setAsking] = useState<BulkAction | null>(null);
  const [busy, setBusy] = useState<{ action: BulkAction; done: number; of: number } | null>(null);
  const [report, setReport] = useState<{ action: BulkAction; outcomes: Outcome[] } | null>(null);
  const [cancelRun] = useMutation(CANCEL_RUN);
  const [retryRun] = useMutation(RETRY_RUN);
  const question = useRef<HTMLDivElement>(null);
  const result = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (asking) question.current?.focus();
  }, [asking]);
  useEffect(() => {
    if (report) result.current?.focus();
  }, [report]);

  const one = async (action: BulkAction, run: Ticked): Promise<Outcome> => {
    try {
      if (action === "cancel") {
        await cancelRun({ variables: { id: run.id } });
        return { id: run.id, ok: true };
      }
      const answer = await retryRun({ variables: { id: run.id, reuseSteps: action === "retry" } });
      const payload = answer.data?.retryRun;
      return { id: run.id, ok: true, runId: payload?.run.id, created: payload?.created };
    } catch (e) {
      return { id: run.id, ok: false, error: describeError(e) };
    }
  };
  const perform = async (action: BulkAction) => {
    const { touch } = planBulk(action, ticked);
    setAsking(null);
    setReport(null);
    const outcomes: Outcome[] = [];
    for (const run of touch) {
      setBusy({ action, done: outcomes.length, of: touch.length });
      outcomes.push(await one(action, run)); // one at a time: the start-rate limit is the tenant's
    }
    setBusy(null);
    setReport({ action, outcomes });
    if (outcomes.every((o) => o.ok)) clear();
  };

  const plan = asking ? planBulk(asking, ticked) : null;
  if (ticked.length === 0 && !asking && !busy && !report) return null; // kept mounted: its report stays
  return (
    <div className="bulk-bar" role="region" aria-label="Ticked runs">
      <div className="bulk-actions">
        <strong data-testid="ticked-count">{runsWord(ticked.length)} ticked</strong>
        {(Object.keys(BULK) as BulkAction[]).map((action) => (
          <button
            key={action}
            type="button"
            aria-disabled={busy || ticked.length === 0 ? true : undefined}
            onClick={() => {
              if (busy || ticked.length === 0) return;
              setReport(null);
              setAsking(action);
            }}
          >
            {BULK[action].button}…
          </button>
        ))}
        <button type="button" className="quiet" onClick={clear} disabled={busy !== null}>
          Untick all
        </button>
      </div>
      {asking && plan && (
        <div className="bulk-ask" ref={question} tabIndex={-1} data-testid="bulk-ask" aria-live="polite">
          {plan.touch.length === 0 ? (
            <p>
              None of the ticked runs can be {BULK[asking].done} ({plan.skip.length === 1 ? "it is" : "they are"}{" "}
              {BULK[asking].skipped}).{" "}
              <button type="button" onClick={() => setAsking(null)}>
                Close
              </button>
            </p>
          ) : (
            <p>
              {BULK[asking].ask(plan.touch.length)}
              {plan.skip.length > 0 && (
                <span className="muted">
                  {" "}
                  {runsWord(plan.skip.length)} {plan.skip.length === 1 ? "is" : "are"} {BULK[asking].skipped} and left
                  alone.
                </span>
              )}{" "}
              <button type="button" className="primary" onClick={() => void perform(asking)}>
                {BULK[asking].go(plan.touch.length)}
              </button>{" "}
              <button type="button" onClick={() => setAsking(null)}>
                Keep them
              </button>
            </p>
          )}
        </div>
      )}
      {busy && (
        <p role="status" className="muted">
          {BULK[busy.action].button}: {busy.done} of {busy.of} done…
        </p>
      )}
      {report && <BulkReport report={report} refTo={result} />}
    </div>
  );
}

function BulkReport({
  report,
  refTo,
}: {
  report: { action: BulkAction; outcomes: Outcome[] };
  refTo: RefObject<HTMLDivElement | null>;
}) {
  const ok = report.outcomes.filter((o) => o.ok);
  const failed = report.outcomes.filter((o) => !o.ok);
  const cameBack = ok.filter((o) => o.created === false).length;
  return (
    <div className="bulk-report" ref={refTo} tabIndex={-1} role="status" data-testid="bulk-report">
      <p>
        {runsWord(ok.length)} {BULK[report.action].done}
        {failed.length > 0 ? `; ${failed.length} failed.` : "."}
        {cameBack > 0 && (
          <span className="muted">
            {" "}
            {cameBack === 1 ? "1 came back as its agent's active run" : `${cameBack} came back as their agents' active runs`}{" "}
            (one active run per agent and key).
          </span>
        )}
      </p>
      {failed.length > 0 && (
        <ul className="bulk-failures" aria-label="Runs that failed">
          {failed.map((o) => (
            <li key={o.id} data-testid="bulk-failure">
              <Link to={`/runs/${o.id}`} className="mono" aria-label={`Run ${o.id}`}>
                {shortId(o.id)}
              </Link>
              : <span className="field-error">{o.error}</span>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
