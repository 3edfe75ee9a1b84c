import { describe, expect, it } from "vitest";
import { childLabel, childrenAfter, childrenFrom, childrenHref, childTotal, hasTree, isPathCut, orderedCounts, treeHref, type TreeRun } from "./tree";

const run = (over: Partial<TreeRun> = {}): TreeRun => ({
  id: "c",
  parentId: null,
  rootId: "c",
  ancestors: [],
  childCounts: [],
  ...over,
});

describe("the run page's tree", () => {
  it("is shown for a run with a parent or with children, not for a lone run", () => {
    expect(hasTree(run())).toBe(false);
    expect(hasTree(null)).toBe(false);
    expect(hasTree(run({ parentId: "p", rootId: "p" }))).toBe(true);
    expect(hasTree(run({ childCounts: [{ status: "QUEUED", count: 2 }] }))).toBe(true);
    expect(hasTree(run({ childCounts: [{ status: "QUEUED", count: 0 }] }))).toBe(false);
  });

  it("counts the children and orders the counts live first, leaving out empty ones", () => {
    const counts = [
      { status: "FAILED" as const, count: 1 },
      { status: "SUCCEEDED" as const, count: 2 },
      { status: "CANCELLED" as const, count: 0 },
      { status: "RUNNING" as const, count: 3 },
      { status: "WAITING" as const, count: 1 },
    ];
    expect(childTotal(counts)).toBe(7);
    expect(orderedCounts(counts).map((c) => c.status)).toEqual(["RUNNING", "WAITING", "SUCCEEDED", "FAILED"]);
  });

  it("knows a path from the root that retention cut short", () => {
    expect(isPathCut(run())).toBe(false);
    expect(isPathCut(run({ parentId: "p", rootId: "r", ancestors: [{ id: "r" }, { id: "p" }] }))).toBe(false);
    expect(isPathCut(run({ parentId: "p", rootId: "r", ancestors: [{ id: "p" }] }))).toBe(true);
    expect(isPathCut(run({ parentId: "p", rootId: "r", ancestors: [] }))).toBe(true);
  });

  it("names a page of children in the address, on the Tree tab, keeping other parameters", () => {
    const params = new URLSearchParams("existing=1");
    expect(childrenHref("/runs/x", params, "abc")).toBe("/runs/x?existing=1&tab=tree&children=abc");
    expect(childrenHref("/runs/x", new URLSearchParams("tab=tree&children=abc"), null)).toBe("/runs/x?tab=tree");
    expect(childrenAfter(new URLSearchParams("tab=tree&children=abc"))).toBe("abc");
    expect(childrenAfter(new URLSearchParams("tab=tree&children="))).toBeNull();
    expect(treeHref("abc")).toBe("/runs/abc?tab=tree");
  });
});

describe("a child's place", () => {
  it("is counted across pages and said in words", () => {
    const second = new URLSearchParams(childrenHref("/runs/x", new URLSearchParams(), "abc", 20).split("?")[1]);
    expect(childrenFrom(second)).toBe(20);
    expect(childrenFrom(new URLSearchParams(childrenHref("/runs/x", second, null).split("?")[1]))).toBe(0);
    expect(childrenFrom(new URLSearchParams("from=-3"))).toBe(0);
    expect(childLabel(5, 6)).toBe("child 5 of 6");
    expect(childLabel(7, 6)).toBe("child 7"); // started since the count was read
  });
});
