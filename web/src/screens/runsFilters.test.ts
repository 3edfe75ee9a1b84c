import { describe, expect, it } from "vitest";
import {
  countText,
  emptyText,
  filtersFromParams,
  isFiltered,
  listUrl,
  NO_FILTERS,
  readSearch,
  type RunFilters,
  totalText,
} from "./runFilters";

describe("the runs filters in the URL", () => {
  it("round-trip: several statuses, agent, a time range, the cursor", () => {
    const url =
      "/runs?status=FAILED&status=CANCELLED&agent=demo&from=2026-01-01T00%3A00%3A00.000Z&order=oldest&size=50&after=abc";
    const filters = filtersFromParams(new URL(url, "http://x").searchParams);
    expect(filters).toEqual({
      status: ["FAILED", "CANCELLED"],
      agent: "demo",
      from: "2026-01-01T00:00:00.000Z",
      to: null,
      order: "OLDEST_FIRST",
      after: "abc",
      key: null,
      tags: [],
      topLevel: false,
      size: 50,
    });
    expect(listUrl(filters)).toBe(url);
  });

  it("round-trip: a key, several tags and the children hidden", () => {
    const url = "/runs?agent=demo&key=conversation%3A42&tag=env%3Aprod&tag=team%40x&children=hide";
    const filters = filtersFromParams(new URL(url, "http://x").searchParams);
    expect(filters.key).toBe("conversation:42");
    expect(filters.tags).toEqual(["env:prod", "team@x"]);
    expect(filters.topLevel).toBe(true);
    expect(listUrl(filters)).toBe(url);
    // a shared link may list tags with commas: read as the same tags, written back one a param
    const commas = filtersFromParams(new URLSearchParams("tag=env:prod,team@x&tag=env:prod&tag="));
    expect(commas.tags).toEqual(["env:prod", "team@x"]);
    expect(listUrl(commas)).toBe("/runs?tag=env%3Aprod&tag=team%40x");
  });

  it("drops what it cannot read", () => {
    const filters = filtersFromParams(new URLSearchParams("status=NOPE&status=QUEUED&from=yesterday&children=show&key="));
    expect(filters.status).toEqual(["QUEUED"]);
    expect(filters.from).toBeNull();
    expect(filters.key).toBeNull();
    expect(filters.topLevel).toBe(false);
    expect(filters.order).toBe("NEWEST_FIRST"); // absent: the default, which the URL leaves out
    expect(listUrl(NO_FILTERS)).toBe("/runs");
    expect(filtersFromParams(new URLSearchParams("order=sideways")).order).toBe("NEWEST_FIRST");
    expect(filtersFromParams(new URLSearchParams("size=37")).size).toBe(20); // not offered
    expect(listUrl({ ...NO_FILTERS, size: 20 })).toBe("/runs"); // the default, left out
  });
});

describe("a list's total", () => {
  it("is exact up to 1,000 and bounded past it", () => {
    expect(totalText(0)).toBe("0 runs");
    expect(totalText(1)).toBe("1 run");
    expect(totalText(1000)).toBe("1,000 runs");
    expect(totalText(1001)).toBe("1,000+ runs"); // counted no further
    expect(countText(1, "failed delivery", "failed deliveries")).toBe("1 failed delivery");
    expect(countText(1001, "delivery", "deliveries")).toBe("1,000+ deliveries");
  });
});

describe("an empty list says why", () => {
  const f = (change: Partial<RunFilters>): RunFilters => ({ ...NO_FILTERS, ...change });

  it("names each filter that emptied it", () => {
    expect(emptyText(NO_FILTERS)).toBe("No runs yet.");
    expect(emptyText(f({ status: ["FAILED", "CANCELLED"], agent: "demo" }))).toBe("No failed or cancelled runs of demo.");
    expect(emptyText(f({ key: "k1", tags: ["a", "b"] }))).toBe("No runs with the key k1 tagged a and b.");
    expect(emptyText(f({ topLevel: true, from: "2026-01-01T00:00:00.000Z" }))).toBe("No top-level runs in that time range.");
  });

  it("counts hidden children and a key as filters, the order and the page not", () => {
    expect(isFiltered(f({ topLevel: true }))).toBe(true);
    expect(isFiltered(f({ key: "k" }))).toBe(true);
    expect(isFiltered(f({ tags: ["t"] }))).toBe(true);
    expect(isFiltered(f({ order: "OLDEST_FIRST", after: "abc" }))).toBe(false);
  });
});

describe("the one search line", () => {
  it("opens a run by its id or its start", () => {
    expect(readSearch(" 0B6C1F4E ")).toEqual({ run: "0b6c1f4e" });
    expect(readSearch("0b6c1f4e-1111-4222-8333-444455556666")).toEqual({ run: "0b6c1f4e-1111-4222-8333-444455556666" });
  });
  it("filters by a key or a tag", () => {
    expect(readSearch("key: order-42")).toEqual({ key: "order-42" });
    expect(readSearch("tag:user:123")).toEqual({ tag: "user:123" });
    expect(readSearch("#vip")).toEqual({ tag: "vip" });
  });
  it("says what it takes otherwise", () => {
    expect(readSearch("abc")).toHaveProperty("error");
    expect(readSearch("key:")).toHaveProperty("error");
    expect(readSearch("tag: ")).toHaveProperty("error");
  });
});
