import { describe, expect, it } from "vitest";
import { BACKOFF_CAP_MS, backoffDelay, backoffWindow, waitOrWake } from "./backoff";

describe("backoffWindow", () => {
  it("doubles from the base", () => {
    expect([0, 1, 2, 3, 4].map((n) => backoffWindow(n, { baseMs: 500 }))).toEqual([
      500, 1000, 2000, 4000, 8000,
    ]);
  });

  it("is capped at about 30 s by default", () => {
    expect(backoffWindow(6)).toBe(BACKOFF_CAP_MS);
    expect(backoffWindow(60)).toBe(BACKOFF_CAP_MS);
    expect(backoffWindow(5000)).toBe(BACKOFF_CAP_MS); // 2^5000 is Infinity: still the cap
    expect(BACKOFF_CAP_MS).toBe(30_000);
  });

  it("treats a negative or fractional attempt as the nearest sane one", () => {
    expect(backoffWindow(-3, { baseMs: 100 })).toBe(100);
    expect(backoffWindow(2.9, { baseMs: 100 })).toBe(400);
  });
});

describe("backoffDelay (full jitter)", () => {
  it("spans the whole window, from zero to just under its top", () => {
    expect(backoffDelay(3, { baseMs: 500, random: () => 0 })).toBe(0);
    expect(backoffDelay(3, { baseMs: 500, random: () => 0.5 })).toBe(2000);
    expect(backoffDelay(3, { baseMs: 500, random: () => 0.999999 })).toBe(3999);
  });

  it("never reaches the cap even when random() misbehaves", () => {
    expect(backoffDelay(100, { random: () => 1 })).toBeLessThan(BACKOFF_CAP_MS);
    expect(backoffDelay(100, { random: () => -1 })).toBe(0);
  });

  it("stays inside [0, window) for many real random draws", () => {
    for (let attempt = 0; attempt < 12; attempt++) {
      const top = backoffWindow(attempt);
      for (let i = 0; i < 200; i++) {
        const d = backoffDelay(attempt);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThan(top);
        expect(Number.isInteger(d)).toBe(true);
      }
    }
  });

  it("is jittered: draws differ", () => {
    const draws = new Set(Array.from({ length: 50 }, () => backoffDelay(8)));
    expect(draws.size).toBeGreaterThan(10);
  });
});

describe("waitOrWake", () => {
  it("returns early when a wake event fires", async () => {
    const target = new EventTarget();
    const started = Date.now();
    const waiting = waitOrWake(60_000, target, ["online"]);
    target.dispatchEvent(new Event("online"));
    await waiting;
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("returns after the delay otherwise", async () => {
    const target = new EventTarget();
    await waitOrWake(5, target, ["online"]);
  });
});
