import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { BURST_MS, BurstGate } from "./refresh";

describe("BurstGate", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("flushes a lone nudge at once", () => {
    const flushed: number[][] = [];
    const gate = new BurstGate<number>((items) => flushed.push(items));
    gate.push(1);
    expect(flushed).toEqual([[1]]);
  });

  it("gathers what follows within the window and flushes it once, when the window ends", () => {
    const flushed: number[][] = [];
    const gate = new BurstGate<number>((items) => flushed.push(items));
    gate.push(1);
    for (let i = 2; i <= 100; i++) gate.push(i);
    expect(flushed).toHaveLength(1);
    vi.advanceTimersByTime(BURST_MS - 1);
    expect(flushed).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(flushed).toHaveLength(2);
    expect(flushed[1]).toHaveLength(99);
  });

  it("is quiet again after an empty window: the next nudge goes at once", () => {
    const flushed: number[][] = [];
    const gate = new BurstGate<number>((items) => flushed.push(items));
    gate.push(1);
    vi.advanceTimersByTime(BURST_MS);
    vi.advanceTimersByTime(BURST_MS); // nothing came: the gate closes
    gate.push(2);
    expect(flushed).toEqual([[1], [2]]);
  });
});
