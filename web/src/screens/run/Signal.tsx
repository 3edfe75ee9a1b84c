import { useMutation } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import { SIGNAL_RUN } from "../../api/documents/runs";
import { describeError } from "../../api/errors";
import { ACTIVE_STATUSES } from "../../api/types";
import { ApprovalActions } from "../../ui/Approval";
import { APPROVAL, describeShown, NOT_ACCEPTED, readSignalForm, type SignalInput } from "../../ui/signal";
import { waitsForSignal } from "../../ui/waiting";
import type { DetailRun } from "./types";

/**
 * Sends a named signal with a JSON payload (checked as JSON before anything is sent). When the
 * run waits for `approval`, Approve and Reject send `{approved: true}` / `{approved: false}`.
 */
export function SignalPanel({ run }: { run: DetailRun }) {
  const [signalRun, sending] = useMutation(SIGNAL_RUN);
  const [name, setName] = useState("");
  const [payload, setPayload] = useState("{}");
  const [key, setKey] = useState("");
  const [formError, setFormError] = useState<{ field: "name" | "payload"; error: string } | null>(null);
  const [outcome, setOutcome] = useState<{ accepted: boolean; name: string } | null>(null);
  const waitsForApproval = run.status === "WAITING" && run.waitingFor === APPROVAL;
  const shown = describeShown(run.waitingShow); // the call this decision is bound to
  const settled = !ACTIVE_STATUSES.includes(run.status);
  const [approvalShown, setApprovalShown] = useState(waitsForApproval);
  useEffect(() => {
    if (waitsForApproval) setApprovalShown(true);
  }, [waitsForApproval]);

  const send = async (input: SignalInput) => {
    setOutcome(null);
    try {
      const result = await signalRun({ variables: { input } });
      const answer = result.data?.signalRun;
      if (answer) setOutcome({ accepted: answer.accepted, name: input.name });
    } catch {
      // shown below from `sending.error`
    }
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const form = readSignalForm(run.id, name || (waitsForSignal(run) ? run.waitingFor : "") || "", payload, key);
    if (!form.ok) {
      setFormError({ field: form.field, error: form.error });
      return;
    }
    setFormError(null);
    void send(form.input);
  };
  const nameError = formError?.field === "name" ? formError.error : null;
  const payloadError = formError?.field === "payload" ? formError.error : null;
  const answer = (
    <>
      {sending.error && (
        <p className="note note-error" role="alert">
          {describeError(sending.error)}
        </p>
      )}
      {outcome &&
        (outcome.accepted ? (
          <p className="note" role="status" data-testid="signal-outcome" data-accepted="true">
            Signal <code>{outcome.name}</code> accepted.
          </p>
        ) : (
          <p className="note note-error" role="alert" data-testid="signal-outcome" data-accepted="false">
            {NOT_ACCEPTED}
          </p>
        ))}
    </>
  );
  // Approve / Reject stay mounted once shown: their answer (and the focus) stays after the run
  // resumes. A settled run takes no signal: the form goes, but the answer to the last send stays
  // (an `accepted: false` that raced the settle must still be seen).
  if (settled && !outcome && !sending.error && !approvalShown) return null;

  return (
    <section className="panel" aria-labelledby="signal-heading">
      <h2 id="signal-heading">Signal</h2>
      {approvalShown && (
        <>
          {waitsForApproval && shown && (
            <p className="note" data-testid="waiting-show">
              It asks to approve <code>{shown}</code>
            </p>
          )}
          <ApprovalActions run={run} waiting={waitsForApproval} />
          {waitsForApproval && (
            <p className="muted small">
              Approve sends the signal <code>approval</code> with <code>{"{approved: true}"}</code>; Reject sends{" "}
              <code>{"{approved: false}"}</code> and the reason, if you give one.
            </p>
          )}
        </>
      )}
      {!settled && (
      <details className="signal-fold" open={waitsForSignal(run) && !waitsForApproval ? true : undefined}>
      <summary>
        {waitsForSignal(run) ? `Send the signal ${run.waitingFor} (or another)` : "Send a signal (kept in its mailbox until a wait takes it)"}
      </summary>
      <form onSubmit={submit} noValidate aria-label="Send a signal" className="signal-form">
        <div className="field">
          <label htmlFor="signal-name">Name</label>
          <input
            id="signal-name"
            name="name"
            value={name}
            placeholder={waitsForSignal(run) ? (run.waitingFor ?? "") : "name"}
            aria-invalid={nameError ? true : undefined}
            aria-describedby={nameError ? "signal-name-error" : undefined}
            onChange={(e) => setName(e.target.value)}
          />
          {!nameError && waitsForSignal(run) && (
            <p className="hint">Empty: the signal it waits for, <code>{run.waitingFor}</code>.</p>
          )}
          {nameError && (
            <p className="field-error" id="signal-name-error" role="alert">
              {nameError}
            </p>
          )}
        </div>
        <div className="field">
          <label htmlFor="signal-payload">Payload (JSON)</label>
          <textarea
            id="signal-payload"
            name="payload"
            className="mono"
            rows={3}
            spellCheck={false}
            value={payload}
            aria-invalid={payloadError ? true : undefined}
            aria-describedby={payloadError ? "signal-payload-error" : undefined}
            onChange={(e) => setPayload(e.target.value)}
          />
          {payloadError && (
            <p className="field-error" id="signal-payload-error" role="alert">
              {payloadError}
            </p>
          )}
        </div>
        <div className="field">
          <label htmlFor="signal-key">Idempotency key (optional)</label>
          <input id="signal-key" name="idempotencyKey" value={key} onChange={(e) => setKey(e.target.value)} />
          <p className="hint">The same key twice delivers the signal once.</p>
        </div>
        <div className="actions">
          <button type="submit" disabled={sending.loading}>
            Send signal
          </button>
        </div>
      </form>
      </details>
      )}
      {answer}
    </section>
  );
}

