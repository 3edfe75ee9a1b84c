import { describe, expect, it } from "vitest";
import { tabHref, tabOf } from "./tabs";

describe("the run page's tabs", () => {
  it("reads the tab from the address, Overview when none or unknown", () => {
    expect(tabOf(new URLSearchParams("tab=steps"))).toBe("steps");
    expect(tabOf(new URLSearchParams(""))).toBe("overview");
    expect(tabOf(new URLSearchParams("tab=nope"))).toBe("overview");
  });
  it("writes it, keeping other parameters, and no parameter for Overview", () => {
    expect(tabHref("/runs/x", new URLSearchParams("existing=1"), "events")).toBe("/runs/x?existing=1&tab=events");
    expect(tabHref("/runs/x", new URLSearchParams("tab=events"), "overview")).toBe("/runs/x");
  });
});
