/**
 * The Start form's run options beside the input (key, strategy, tags), the draft the form keeps
 * in sessionStorage, and which run holds a key: pure, tested without a browser (docs/keys.md).
 */

import type { RunConflict } from "../../api/generated";
import type { Field, Values } from "../../ui/schemaForm";
import { initialValues } from "../../ui/schemaForm";

export const MAX_KEY = 200;
export const MAX_TAGS = 10;
const TAG = /^[A-Za-z0-9:_.@/-]{1,64}$/;

/** The strategies in the order the form offers them, each in words. */
export const STRATEGIES: readonly { value: RunConflict; label: string }[] = [
  { value: "RETURN_EXISTING", label: "Return existing: hand back the active run" },
  { value: "ENQUEUE", label: "Enqueue: queue a new run behind it" },
  { value: "CANCEL_PREVIOUS", label: "Cancel previous: cancel it, then start" },
  { value: "REJECT", label: "Reject: refuse the start" },
  { value: "SIGNAL_EXISTING", label: "Signal existing: send the input to it" },
];

export function strategyLabel(value: RunConflict): string {
  return STRATEGIES.find((s) => s.value === value)?.label ?? value;
}

export type Checked<T> = { ok: true; value: T } | { ok: false; error: string };

/** The key as typed: "" is no key (the agent's default applies), else 1 to 200 characters as is. */
export function checkKey(text: string): Checked<string | null> {
  if (text === "") return { ok: true, value: null };
  if (text.length > MAX_KEY) return { ok: false, error: `A key is at most ${MAX_KEY} characters.` };
  return { ok: true, value: text };
}

/** Tags as typed, separated by commas or spaces: each once, at most 10, each 1 to 64 of [A-Za-z0-9:_.@/-]. */
export function parseTags(text: string): Checked<string[]> {
  const tags = [...new Set(text.split(/[\s,]+/).filter(Boolean))];
  const bad = tags.find((t) => !TAG.test(t));
  if (bad !== undefined) {
    return { ok: false, error: `“${bad.slice(0, 80)}”: a tag is 1 to 64 characters of A-Z a-z 0-9 : _ . @ / -` };
  }
  if (tags.length > MAX_TAGS) return { ok: false, error: `At most ${MAX_TAGS} tags (${tags.length} given).` };
  return { ok: true, value: tags };
}

// --- the draft: what was typed, per agent, for the tab's life -----------------------------------

export interface Draft {
  values: Values;
  key: string;
  /** "" is the agent's default */
  onConflict: RunConflict | "";
  tags: string;
}

type Store = Pick<Storage, "getItem" | "setItem" | "removeItem">;

const PREFIX = "outlive.start-run.";
const LAST_AGENT = `${PREFIX}agent`;
const draftKey = (agent: string) => `${PREFIX}draft.${agent}`;

const isValues = (v: unknown): v is Values =>
  typeof v === "object" &&
  v !== null &&
  !Array.isArray(v) &&
  Object.values(v).every((x) => typeof x === "string" || typeof x === "boolean");

/** The draft kept for `agent`, or null (none, or not one this app wrote). */
export function loadDraft(store: Store, agent: string): Draft | null {
  let saved: unknown;
  try {
    saved = JSON.parse(store.getItem(draftKey(agent)) ?? "null");
  } catch {
    return null;
  }
  if (typeof saved !== "object" || saved === null) return null;
  const d = saved as Record<string, unknown>;
  const strategy = d["onConflict"];
  if (!isValues(d["values"]) || typeof d["key"] !== "string" || typeof d["tags"] !== "string") return null;
  const known = strategy === "" || STRATEGIES.some((s) => s.value === strategy);
  return { values: d["values"], key: d["key"], tags: d["tags"], onConflict: known ? (strategy as Draft["onConflict"]) : "" };
}

export function saveDraft(store: Store, agent: string, draft: Draft): void {
  try {
    store.setItem(draftKey(agent), JSON.stringify(draft));
    store.setItem(LAST_AGENT, agent);
  } catch {
    // storage full or refused: the form still works, it just forgets
  }
}

export function clearDraft(store: Store, agent: string): void {
  store.removeItem(draftKey(agent));
}

export function lastAgent(store: Store): string | null {
  return store.getItem(LAST_AGENT);
}

/** The form's values from a draft: the schema's defaults, then what was typed for fields it still has. */
export function restoreValues(fields: Field[], saved: Values | undefined): Values {
  const values = initialValues(fields);
  for (const f of fields) {
    const v = saved?.[f.name];
    if (v !== undefined && typeof v === typeof values[f.name]) values[f.name] = v;
  }
  return values;
}

// --- who holds a key --------------------------------------------------------------------------

export interface LineRun {
  id: string;
  queuedBehindId: string | null;
}

/** The active run of a key (the head of its line: no queuedBehindId) and how many wait behind it. */
export function holderOf<R extends LineRun>(active: readonly R[]): { holder: R | null; behind: number } {
  const holder = active.find((r) => r.queuedBehindId === null) ?? null;
  return { holder, behind: holder ? active.length - 1 : active.length };
}

/** What Start run will do, in words, when the key has an active run. */
export function whatStartDoes(strategy: RunConflict, behind: number): string {
  switch (strategy) {
    case "RETURN_EXISTING":
      return "Start run will hand this run back: nothing new is started.";
    case "ENQUEUE":
      return behind > 0
        ? `Start run will queue a new run at the end of its line (${behind} already queued behind it).`
        : "Start run will queue a new run behind it: it starts when this one settles.";
    case "CANCEL_PREVIOUS":
      return "Start run will cancel it (and any run queued behind it), then start the new run.";
    case "REJECT":
      return "Start run will be refused (RUN_ACTIVE): nothing is started.";
    case "SIGNAL_EXISTING":
      return "Start run will send the input to it as the signal `input`: nothing new is started.";
    default:
      return `Start run will apply ${String(strategy)}.`;
  }
}
