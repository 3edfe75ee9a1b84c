import { describe, expect, it } from "vitest";
import { childBars } from "./childBars";
import type { Band } from "./waterfall";

const T0 = "2026-12-06T12:00:00.000Z";
const at = (ms: number) => new Date(Date.parse(T0) + ms).toISOString();

function band(attempt: number, offset: number, duration: number): Band {
  return { attempt, end: "waiting", offset, duration, alive: null, segments: [], endData: null };
}

describe("a parent's children on its waterfall", () => {
  it("draws each child from its creation to its settle under the attempt that started it", () => {
    const bands = [band(1, 10, 90), band(2, 500, 100)];
    const children = [
      { id: "a", agent: "demo", status: "SUCCEEDED", createdAt: at(80), startedAt: at(100), finishedAt: at(300) },
      { id: "b", agent: "demo", status: "RUNNING", createdAt: at(520), startedAt: at(530), finishedAt: null },
      { id: "c", agent: "demo", status: "QUEUED", createdAt: at(540), startedAt: null, finishedAt: null },
    ];
    const bars = childBars(children, { createdAt: T0 }, bands, Date.parse(T0) + 1000);
    expect(bars.get(bands[0]!)!.map((b) => [b.child.id, b.position, b.offset, b.queued, b.duration])).toEqual([
      ["a", 1, 80, 20, 220],
    ]);
    expect(bars.get(bands[1]!)!.map((b) => [b.child.id, b.position, b.offset, b.queued, b.duration])).toEqual([
      ["b", 2, 520, 10, 480], // still running: until now
      ["c", 3, 540, null, 460], // not started yet
    ]);
  });

  it("has nothing to draw before the parent's first claim", () => {
    const children = [{ id: "a", agent: "demo", status: "QUEUED", createdAt: at(5) }];
    expect(childBars(children, { createdAt: T0 }, []).size).toBe(0);
  });
});
