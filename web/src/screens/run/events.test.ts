import { describe, expect, it } from "vitest";
import { eventTypes, windowEvents } from "./events";

const events = [
  { seq: 1, type: "claimed" },
  { seq: 2, type: "turn" },
  { seq: 3, type: "step" },
  { seq: 4, type: "turn" },
  { seq: 5, type: "step" },
  { seq: 6, type: "succeeded" },
];

describe("the Events tab", () => {
  it("counts each type in the order first seen", () => {
    expect(eventTypes(events)).toEqual([
      { type: "claimed", count: 1 },
      { type: "turn", count: 2 },
      { type: "step", count: 2 },
      { type: "succeeded", count: 1 },
    ]);
  });
  it("filters by type and draws a window", () => {
    expect(windowEvents(events, "step", 1)).toEqual({ matching: 2, rows: [{ seq: 3, type: "step" }] });
    expect(windowEvents(events, "", 10).rows).toHaveLength(6);
  });
});

describe("searching a timeline", () => {
  const events = [
    { seq: 1, type: "claimed", data: { attempt: 1 } },
    { seq: 2, type: "signal", data: { name: "approval", by: "Ann@acme.test" } },
    { seq: 3, type: "step", data: { name: "refund", occurrence: 1 } },
  ];
  it("finds the text in a type or in the data, in any case, with the type filter", () => {
    expect(windowEvents(events, "", 10, "ann@").rows.map((e) => e.seq)).toEqual([2]);
    expect(windowEvents(events, "", 10, "STEP").rows.map((e) => e.seq)).toEqual([3]);
    expect(windowEvents(events, "step", 10, "approval")).toEqual({ matching: 0, rows: [] });
    expect(windowEvents(events, "", 10, "  ").matching).toBe(3);
  });
});
