import { useMutation } from "@apollo/client/react";
import { useEffect, useRef, useState } from "react";
import { SIGNAL_RUN } from "../api/documents/runs";
import { describeError } from "../api/errors";
import { type ApprovalRun, approvalInput, NOT_ACCEPTED, rejectionInput, type SignalInput } from "./signal";

export type Decision = { kind: "approved" | "rejected" | "refused"; text: string };

/**
 * Approve, or Reject with an optional reason after a confirmation, for a run WAITING for
 * `approval`. The answer (accepted, not accepted, or the error) is written right next to the
 * buttons; keyboard focus stays on the button pressed, or moves to the answer when the buttons go
 * away (the run resumed). `waiting`: the run still waits (the buttons show); `onSend` tells the caller
 * a decision is being sent (a list keeps the row, and this answer, until the person moves on).
 */
export function ApprovalActions({
  run,
  waiting,
  label = "Approval",
  onSend,
}: {
  run: ApprovalRun;
  waiting: boolean;
  label?: string;
  onSend?: () => void;
}) {
  const [signalRun, sending] = useMutation(SIGNAL_RUN);
  const [rejecting, setRejecting] = useState(false);
  const [reason, setReason] = useState("");
  const [decision, setDecision] = useState<Decision | null>(null);
  const answer = useRef<HTMLParagraphElement>(null);
  const reasonId = `reject-reason-${run.id}`;

  const send = async (input: SignalInput, kind: "approved" | "rejected") => {
    if (sending.loading) return; // aria-disabled, not disabled: focus stays on the button
    setDecision(null);
    onSend?.(); // before the answer updates the cache (and a list may drop the run)
    try {
      const result = await signalRun({ variables: { input } });
      const accepted = result.data?.signalRun.accepted ?? false;
      const made: Decision = accepted
        ? { kind, text: kind === "approved" ? "Approved: the run resumes." : "Rejected: the run resumes with the answer no." }
        : { kind: "refused", text: NOT_ACCEPTED };
      setDecision(made);
      setRejecting(false);
    } catch {
      // shown next to the buttons from `sending.error`
    }
  };
  // The buttons go once the run resumes: the answer takes the focus, so it is not lost to <body>.
  useEffect(() => {
    if (!waiting && decision && answer.current && document.activeElement === document.body) answer.current.focus();
  }, [waiting, decision]);

  const busy = sending.loading ? true : undefined;
  return (
    <div className="approval-box" role="group" aria-label={label}>
      {waiting && !rejecting && (
        <div className="actions">
          <button type="button" className="primary" aria-disabled={busy} onClick={() => void send(approvalInput(run, true), "approved")}>
            Approve
          </button>
          <button type="button" className="danger" aria-disabled={busy} onClick={() => setRejecting(true)}>
            Reject…
          </button>
        </div>
      )}
      {waiting && rejecting && (
        <div className="reject-confirm">
          <label htmlFor={reasonId}>Reason for rejecting (optional)</label>
          <input id={reasonId} value={reason} autoFocus onChange={(e) => setReason(e.target.value)} />
          <div className="actions">
            <button type="button" className="danger" aria-disabled={busy} onClick={() => void send(rejectionInput(run, reason), "rejected")}>
              Reject
            </button>
            <button type="button" className="quiet" onClick={() => setRejecting(false)}>
              Keep waiting
            </button>
          </div>
        </div>
      )}
      {sending.loading && <p className="small muted" role="status">Sending…</p>}
      {sending.error && !sending.loading && (
        <p className="note note-error small" role="alert">
          {describeError(sending.error)} Nothing was delivered.
        </p>
      )}
      {decision && (
        <p
          ref={answer}
          tabIndex={-1}
          className={decision.kind === "refused" ? "note note-error small" : "note small"}
          role={decision.kind === "refused" ? "alert" : "status"}
          data-testid="approval-outcome"
          data-decision={decision.kind}
        >
          {decision.text}
        </p>
      )}
    </div>
  );
}
