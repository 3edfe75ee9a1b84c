import { describe, expect, it } from "vitest";
import { NO_FILTERS } from "../runFilters";
import { BY_FILTER, filterFor, progressText, statusesFor, statusWords } from "./byFilter";

describe("actions on every matching run", () => {
  it("take the statuses they can act on under the list's status filter", () => {
    expect(statusesFor("cancel", [])).toEqual(["QUEUED", "RUNNING", "WAITING"]);
    expect(statusesFor("replay", [])).toEqual(["FAILED"]); // retry what failed
    expect(statusesFor("cancel", ["RUNNING", "FAILED"])).toEqual(["RUNNING"]);
    expect(statusesFor("replay", ["RUNNING", "FAILED", "CANCELLED"])).toEqual(["FAILED", "CANCELLED"]);
    expect(statusesFor("cancel", ["SUCCEEDED"])).toBeNull(); // nothing settled is cancelled
    expect(statusesFor("replay", ["QUEUED", "WAITING"])).toBeNull();
  });

  it("send the list's own filters", () => {
    const f = {
      ...NO_FILTERS,
      status: ["QUEUED" as const],
      agent: "demo",
      from: "2026-12-01T00:00:00.000Z",
      to: "2026-12-02T00:00:00.000Z",
      key: "order-1",
      tags: ["deploy:42"],
      topLevel: true,
    };
    expect(filterFor("cancel", f)).toEqual({
      status: ["QUEUED"],
      agent: "demo",
      since: "2026-12-01T00:00:00.000Z",
      before: "2026-12-02T00:00:00.000Z",
      key: "order-1",
      tags: ["deploy:42"],
      topLevel: true,
    });
    expect(filterFor("replay", f)).toBeNull();
    expect(filterFor("replay", NO_FILTERS)).toEqual({
      status: ["FAILED"],
      agent: null,
      since: null,
      before: null,
      key: null,
      tags: null,
      topLevel: false,
    });
  });

  it("say how many, and that the cap takes the oldest", () => {
    expect(statusWords(["QUEUED", "RUNNING", "WAITING"])).toBe("queued, running or waiting");
    expect(statusWords(["FAILED"])).toBe("failed");
    expect(BY_FILTER.cancel.ask(1, ["WAITING"])).toBe(
      "Cancel 1 run matching these filters (waiting)? Running ones stop before their next step.",
    );
    expect(BY_FILTER.cancel.ask(1000, ["QUEUED"])).toContain("Cancel the oldest 1,000 runs matching");
    expect(BY_FILTER.replay.go(1234)).toBe("Yes, replay 1,234 runs");
  });

  it("count progress by what the kind does", () => {
    const p = { processed: 40, total: 120, started: 0, cancelled: 38, skipped: 2 };
    expect(progressText({ ...p, kind: "CANCEL" })).toBe("40 of 120 processed (33%) · 38 cancelled · 2 skipped");
    expect(progressText({ ...p, kind: "REPLAY", started: 38, cancelled: 0 })).toBe(
      "40 of 120 processed (33%) · 38 started · 2 skipped",
    );
    expect(progressText({ ...p, kind: "CANCEL", processed: 0, total: 0 })).toContain("(100%)");
  });
});
