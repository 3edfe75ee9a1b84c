/** The Start form's state for one agent, kept in sessionStorage as it is typed (startOptions.ts). */

import { useEffect, useState } from "react";
import type { Field } from "../../ui/schemaForm";
import { clearDraft, type Draft, lastAgent, loadDraft, restoreValues, saveDraft } from "./startOptions";

type Store = Pick<Storage, "getItem" | "setItem" | "removeItem">;

const memory = new Map<string, string>();
const MEMORY: Store = {
  getItem: (k) => memory.get(k) ?? null,
  setItem: (k, v) => void memory.set(k, v),
  removeItem: (k) => void memory.delete(k),
};

/** The tab's sessionStorage, or memory where the browser refuses it (the form then forgets on reload). */
function store(): Store {
  try {
    return window.sessionStorage ?? MEMORY;
  } catch {
    return MEMORY;
  }
}

/** What was typed for `agent` (its draft, or the schema's defaults), saved at every change. */
export function useStartDraft(agent: string, fields: Field[]): [Draft, (change: Partial<Draft>) => void] {
  const [draft, setDraft] = useState<Draft>(() => {
    const saved = loadDraft(store(), agent);
    return {
      values: restoreValues(fields, saved?.values),
      key: saved?.key ?? "",
      onConflict: saved?.onConflict ?? "",
      tags: saved?.tags ?? "",
    };
  });
  useEffect(() => saveDraft(store(), agent, draft), [agent, draft]);
  return [draft, (change) => setDraft((d) => ({ ...d, ...change }))];
}

/** Forget the draft once its run started: the next visit starts from the defaults. */
export function forgetDraft(agent: string): void {
  clearDraft(store(), agent);
}

/** The agent the form showed last in this tab, if any. */
export function lastStartAgent(): string | null {
  return lastAgent(store());
}

/** `value`, once it has not changed for `ms` (a key is looked up when the typing pauses). */
export function useDebounced<T>(value: T, ms = 300): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(timer);
  }, [value, ms]);
  return settled;
}
