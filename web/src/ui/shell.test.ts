import { describe, expect, it } from "vitest";
import { nextTheme, ShortcutReader } from "./shell";

describe("ShortcutReader", () => {
  it("reads / as search and g r as runs, never while typing", () => {
    const r = new ShortcutReader();
    expect(r.read("/", 0, false, false)).toBe("search");
    expect(r.read("/", 0, true, false)).toBeNull();
    expect(r.read("g", 100, false, false)).toBeNull();
    expect(r.read("r", 400, false, false)).toBe("runs");
    expect(r.read("r", 500, false, false)).toBeNull(); // g was used up
    expect(r.read("g", 1000, false, false)).toBeNull();
    expect(r.read("r", 2500, false, false)).toBeNull(); // too late
    expect(r.read("/", 0, false, true)).toBeNull(); // with a modifier
  });
});

describe("nextTheme", () => {
  it("cycles system, light, dark", () => {
    expect(nextTheme("system")).toBe("light");
    expect(nextTheme("light")).toBe("dark");
    expect(nextTheme("dark")).toBe("system");
  });
});
