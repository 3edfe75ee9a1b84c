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
