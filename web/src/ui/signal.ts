/**
 * The signal form's checks, and what Approve and Reject send (pure, tested without a browser).
 */

export interface SignalInput {
  id: string;
  name: string;
  payload: unknown;
  idempotencyKey?: string;
  waitId?: string;
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

/** What Approve and Reject need of the run: its id, and the wait it shows (`waitId`, while WAITING). */
export interface ApprovalRun {
  id: string;
  attempt: number;
  waitId?: string | null;
}

/**
 * Approve / Reject: `{approved: true | false}` to the signal `approval`, bound to the wait the
 * person saw (`waitId`): the server refuses it (`accepted: false`) once that wait is over, so a
 * late or second decision never answers a later wait. The key is per wait too, so a second click,
 * or Reject after Approve, answers `accepted: false`. Without a `waitId` (the run no longer
 * waits), the key falls back to the attempt that parked.
 */
export function approvalInput(run: ApprovalRun, approved: boolean): SignalInput {
  const wait = run.waitId ?? `attempt-${run.attempt}`;
  const input: SignalInput = {
    id: run.id,
    name: APPROVAL,
    payload: { approved },
    idempotencyKey: `console:${APPROVAL}:${run.id}:${wait}`,
  };
  if (run.waitId) input.waitId = run.waitId;
  return input;
}

export const NOT_ACCEPTED =
  "Not accepted: the run had settled, the wait it answered was over, or this key was already used. Nothing was delivered.";

/** Reject: `{approved: false}`, with the reason when one was given; the same key as Approve. */
export function rejectionInput(run: ApprovalRun, reason: string): SignalInput {
  const input = approvalInput(run, false);
  const why = reason.trim();
  return why ? { ...input, payload: { approved: false, reason: why } } : input;
}

/**
 * What a wait shows the person who answers it (`Run.waitingShow`), in words: a tool call waiting
 * for approval reads `refund(order_id: "A-2", amount: 900)`; anything else is its JSON; null when
 * the wait shows nothing. The decision is bound to that wait, so what is shown is what is decided.
 */
export function describeShown(show: unknown): string | null {
  if (show === null || show === undefined) return null;
  if (typeof show === "object" && !Array.isArray(show)) {
    const { tool, args } = show as { tool?: unknown; args?: unknown };
    if (typeof tool === "string") {
      const given =
        args && typeof args === "object" && !Array.isArray(args)
          ? Object.entries(args as Record<string, unknown>)
              .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
              .join(", ")
          : args === undefined
            ? ""
            : JSON.stringify(args);
      return `${tool}(${given})`;
    }
  }
  return JSON.stringify(show);
}
