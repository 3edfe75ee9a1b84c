import { describe, expect, it } from "vitest";
import { planBulk, runsWord } from "./bulkPlan";

const runs = [
  { id: "a", status: "RUNNING" as const },
  { id: "b", status: "FAILED" as const },
  { id: "c", status: "SUCCEEDED" as const },
  { id: "d", status: "CANCELLED" as const },
];

describe("a bulk action's plan", () => {
  it("touches the runs it applies to and says which it leaves alone", () => {
    const ids = (action: "cancel" | "retry" | "replay") => {
      const { touch, skip } = planBulk(action, runs);
      return [touch.map((r) => r.id), skip.map((r) => r.id)];
    };
    expect(ids("cancel")).toEqual([["a"], ["b", "c", "d"]]); // only active runs cancel
    expect(ids("retry")).toEqual([["b", "d"], ["a", "c"]]); // from where it failed: failed or cancelled
    expect(ids("replay")).toEqual([["b", "c", "d"], ["a"]]); // any settled run, from the start
  });

  it("counts in words", () => {
    expect(runsWord(1)).toBe("1 run");
    expect(runsWord(3)).toBe("3 runs");
  });
});
