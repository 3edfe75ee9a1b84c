import { describe, expect, it } from "vitest";
import { fieldsOf } from "../../ui/schemaForm";
import {
  checkKey,
  clearDraft,
  type Draft,
  holderOf,
  lastAgent,
  loadDraft,
  parseTags,
  restoreValues,
  saveDraft,
  whatStartDoes,
} from "./startOptions";

/** A Storage as sessionStorage behaves, in memory. */
function memoryStore() {
  const items = new Map<string, string>();
  return {
    items,
    getItem: (k: string) => items.get(k) ?? null,
    setItem: (k: string, v: string) => void items.set(k, v),
    removeItem: (k: string) => void items.delete(k),
  };
}

describe("the key and tags as typed", () => {
  it("an empty key is no key: the agent's default applies", () => {
    expect(checkKey("")).toEqual({ ok: true, value: null });
    expect(checkKey(" conversation:42 ")).toEqual({ ok: true, value: " conversation:42 " }); // as typed
    expect(checkKey("k".repeat(200)).ok).toBe(true);
    expect(checkKey("k".repeat(201))).toEqual({ ok: false, error: "A key is at most 200 characters." });
  });

  it("tags split on spaces and commas, each once, and are checked as the server checks them", () => {
    expect(parseTags("")).toEqual({ ok: true, value: [] });
    expect(parseTags(" env:prod, team@x  env:prod,,v1.2/beta-x_y ")).toEqual({
      ok: true,
      value: ["env:prod", "team@x", "v1.2/beta-x_y"],
    });
    const eleven = Array.from({ length: 11 }, (_, i) => `t${i}`).join(" ");
    expect(parseTags(eleven)).toEqual({ ok: false, error: "At most 10 tags (11 given)." });
    expect(parseTags(Array.from({ length: 10 }, (_, i) => `t${i}`).join(",")).ok).toBe(true);
    const bad = parseTags("ok caf\u00e9");
    expect(bad.ok).toBe(false);
    expect(!bad.ok && bad.error).toContain("café");
    expect(parseTags("x".repeat(65)).ok).toBe(false);
  });
});

describe("the draft kept per agent", () => {
  const fields = fieldsOf({
    type: "object",
    properties: { turns: { type: "integer", default: 3 }, loud: { type: "boolean", default: false } },
  });
  const draft: Draft = { values: { turns: "7", loud: true }, key: "k1", onConflict: "ENQUEUE", tags: "a b" };

  it("comes back as it was saved, for its agent only, until it is cleared", () => {
    const store = memoryStore();
    saveDraft(store, "demo", draft);
    expect(loadDraft(store, "demo")).toEqual(draft);
    expect(loadDraft(store, "other")).toBeNull();
    expect(lastAgent(store)).toBe("demo");
    clearDraft(store, "demo");
    expect(loadDraft(store, "demo")).toBeNull();
  });

  it("is dropped when it is not one this app wrote, and an unknown strategy means the default", () => {
    const store = memoryStore();
    store.setItem("outlive.start-run.draft.demo", "{not json");
    expect(loadDraft(store, "demo")).toBeNull();
    store.setItem("outlive.start-run.draft.demo", JSON.stringify({ ...draft, values: { turns: 7 } }));
    expect(loadDraft(store, "demo")).toBeNull(); // a number is not what an input holds
    store.setItem("outlive.start-run.draft.demo", JSON.stringify({ ...draft, onConflict: "SIDEWAYS" }));
    expect(loadDraft(store, "demo")?.onConflict).toBe("");
  });

  it("restores the fields the schema still has, over its defaults", () => {
    expect(restoreValues(fields, undefined)).toEqual({ turns: "3", loud: false });
    expect(restoreValues(fields, { turns: "7", gone: "x", loud: "yes" })).toEqual({ turns: "7", loud: false });
  });
});

describe("who holds a key", () => {
  it("the head of the line (no queuedBehindId), and the runs behind it", () => {
    const head = { id: "a", queuedBehindId: null };
    const line = [{ id: "b", queuedBehindId: "a" }, head, { id: "c", queuedBehindId: "b" }];
    expect(holderOf(line)).toEqual({ holder: head, behind: 2 });
    expect(holderOf([])).toEqual({ holder: null, behind: 0 });
  });

  it("says what Start run will do under each strategy", () => {
    expect(whatStartDoes("RETURN_EXISTING", 0)).toContain("hand this run back");
    expect(whatStartDoes("ENQUEUE", 0)).toContain("behind it");
    expect(whatStartDoes("ENQUEUE", 2)).toContain("2 already queued");
    expect(whatStartDoes("CANCEL_PREVIOUS", 0)).toContain("cancel it");
    expect(whatStartDoes("REJECT", 0)).toContain("RUN_ACTIVE");
    expect(whatStartDoes("SIGNAL_EXISTING", 0)).toContain("signal `input`");
  });
});
