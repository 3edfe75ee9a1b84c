import { useMutation } from "@apollo/client/react";
import { useState } from "react";
import { CANCEL_RUN, PAUSE_RUN, RESUME_RUN } from "../api/documents/runs";
import { describeError } from "../api/errors";
import type { RunStatus } from "../api/types";
import { ACTIVE_STATUSES } from "../api/types";
import { Link } from "../app/router";
import { Confirmed } from "./Confirmed";
import { holdOf } from "./waiting";

export interface HoldRun {
  id: string;
  status: RunStatus;
  waitingFor?: string | null;
  pausedAt?: string | null;
  heldByBudgetId?: string | null;
}

/**
 * A held run's ways out, or Pause for an active run that is not held:
 * - held by a budget: "Raise once" (resumeRun overBudget: this run may finish past its budgets),
 *   "Raise the limit" (the budget's edit form), and Cancel (asks first) when `withCancel`;
 * - paused: Resume (and Cancel);
 * - held on its code version: Resume once a fix is deployed (held again if it still diverges), and
 *   Cancel;
 * - active: Pause (QUEUED or WAITING at once, RUNNING at its next step; nothing is lost).
 * The answer (or the refusal, such as a role that may not spend past a budget) shows beside them.
 */
export function HoldActions({ run, withCancel = false, label }: { run: HoldRun; withCancel?: boolean; label: string }) {
  const [pause, pausing] = useMutation(PAUSE_RUN);
  const [resume, resuming] = useMutation(RESUME_RUN);
  const [cancel, cancelling] = useMutation(CANCEL_RUN);
  const [done, setDone] = useState<string | null>(null);
  const hold = holdOf(run);
  const busy = pausing.loading || resuming.loading || cancelling.loading ? true : undefined;
  const error = pausing.error ?? resuming.error ?? cancelling.error;
  if (!ACTIVE_STATUSES.includes(run.status) && !done) return null;
  const act = (what: () => Promise<unknown>, said: string) => {
    if (busy) return;
    setDone(null);
    void what()
      .then(() => setDone(said))
      .catch(() => undefined);
  };
  const resumeIt = (overBudget: boolean, said: string) =>
    act(() => resume({ variables: { id: run.id, overBudget } }), said);
  return (
    <div className="held-actions" role="group" aria-label={label}>
      {ACTIVE_STATUSES.includes(run.status) && hold === "budget" && (
        <>
          <button
            type="button"
            className="primary"
            aria-disabled={busy}
            onClick={() => resumeIt(true, "Raised once: it goes on past its budget.")}
          >
            Raise once
          </button>
          {run.heldByBudgetId && (
            <Link to={`/budgets?edit=${encodeURIComponent(run.heldByBudgetId)}`} className="button">
              Raise the limit
            </Link>
          )}
        </>
      )}
      {ACTIVE_STATUSES.includes(run.status) && hold === "pause" && (
        <button type="button" className="primary" aria-disabled={busy} onClick={() => resumeIt(false, "Resumed.")}>
          Resume
        </button>
      )}
      {ACTIVE_STATUSES.includes(run.status) && hold === "version" && (
        <button
          type="button"
          className="primary"
          aria-disabled={busy}
          title="Once a fix is deployed: a run that still diverges is held again"
          onClick={() => resumeIt(false, "Resumed on the deployed code.")}
        >
          Resume on the deployed code
        </button>
      )}
      {ACTIVE_STATUSES.includes(run.status) && hold === null && (
        <button
          type="button"
          aria-disabled={busy}
          onClick={() => act(() => pause({ variables: { id: run.id } }), "Paused: it stops at its next step.")}
        >
          Pause
        </button>
      )}
      {withCancel && ACTIVE_STATUSES.includes(run.status) && (
        <Confirmed
          ask="Cancel…"
          question="Cancel this run?"
          yes="Yes, cancel it"
          busy={busy}
          onYes={() => act(() => cancel({ variables: { id: run.id } }), "Cancelled.")}
        />
      )}
      {done && !error && (
        <span className="small" role="status" data-testid="hold-outcome">
          {done}
        </span>
      )}
      {error && (
        <span className="note note-error small" role="alert">
          {describeError(error)}
        </span>
      )}
    </div>
  );
}
