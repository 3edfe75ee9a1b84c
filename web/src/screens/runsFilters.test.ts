import { describe, expect, it } from "vitest";
import { filtersFromParams, listUrl } from "./runFilters";

describe("the runs filters in the URL", () => {
  it("round-trip: several statuses, agent, a time range, the cursor", () => {
    const url = "/runs?status=FAILED&status=CANCELLED&agent=demo&from=2026-01-01T00%3A00%3A00.000Z&after=abc";
    const filters = filtersFromParams(new URL(url, "http://x").searchParams);
    expect(filters).toEqual({
      status: ["FAILED", "CANCELLED"],
      agent: "demo",
      from: "2026-01-01T00:00:00.000Z",
      to: null,
      after: "abc",
    });
    expect(listUrl(filters)).toBe(url);
  });

  it("drops what it cannot read", () => {
    const filters = filtersFromParams(new URLSearchParams("status=NOPE&status=QUEUED&from=yesterday"));
    expect(filters.status).toEqual(["QUEUED"]);
    expect(filters.from).toBeNull();
    expect(listUrl({ status: [], agent: null, from: null, to: null, after: null })).toBe("/runs");
  });
});
