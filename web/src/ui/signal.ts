/**
 * The signal form's checks, and what Approve and Reject send (pure, tested without a browser).
 */

export interface SignalInput {
  id: string;
  name: string;
  payload: unknown;
  idempotencyKey?: string;
}

export type SignalForm = { ok: true; input: SignalInput } | { ok: false; field: "name" | "payload"; error: string };

/**
 * The form's fields as a `SignalRunInput`, or the first thing wrong. The payload is JSON (empty
 * means null); the key is optional (empty: none, so every send is a new signal).
 */
export function readSignalForm(id: string, name: string, payloadText: string, key: string): SignalForm {
  const trimmed = name.trim();
  if (!trimmed) return { ok: false, field: "name", error: "Give the signal a name (the run's wait names it)." };
  let payload: unknown = null;
  if (payloadText.trim()) {
    try {
      payload = JSON.parse(payloadText);
    } catch (e) {
      return {
        ok: false,
        field: "payload",
        error: `The payload is not valid JSON (${e instanceof Error ? e.message : String(e)}); nothing was sent.`,
      };
    }
  }
  const input: SignalInput = { id, name: trimmed, payload };
  if (key.trim()) input.idempotencyKey = key.trim();
  return { ok: true, input };
}

/** The signal name Approve and Reject answer. */
export const APPROVAL = "approval";

/**
 * Approve / Reject: `{approved: true | false}` to the signal `approval`, with one key per wait
 * (the run's id and the attempt that parked), so a second click, or Reject after Approve, in the
 * same wait answers `accepted: false` instead of queueing a second decision in the mailbox.
 */
export function approvalInput(run: { id: string; attempt: number }, approved: boolean): SignalInput {
  return {
    id: run.id,
    name: APPROVAL,
    payload: { approved },
    idempotencyKey: `console:${APPROVAL}:${run.id}:${run.attempt}`,
  };
}

export const NOT_ACCEPTED = "Not accepted: the run had settled, or this key was already used. Nothing was delivered.";

/** Reject: `{approved: false}`, with the reason when one was given; the same key as Approve. */
export function rejectionInput(run: { id: string; attempt: number }, reason: string): SignalInput {
  const input = approvalInput(run, false);
  const why = reason.trim();
  return why ? { ...input, payload: { approved: false, reason: why } } : input;
}
