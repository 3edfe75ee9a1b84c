import { describe, expect, it } from "vitest";
import { filtersFromParams, listUrl, type RunFilters } from "./runFilters";

describe("the runs filters in the URL", () => {
  it("round-trip: several statuses, agent, a time range, the cursor", () => {
    const url =
      "/runs?status=FAILED&status=CANCELLED&agent=demo&from=2026-01-01T00%3A00%3A00.000Z&order=oldest&after=abc";
    const filters = filtersFromParams(new URL(url, "http://x").searchParams);
    expect(filters).toEqual({
      status: ["FAILED", "CANCELLED"],
      agent: "demo",
      from: "2026-01-01T00:00:00.000Z",
      to: null,
      order: "OLDEST_FIRST",
      after: "abc",
    });
    expect(listUrl(filters)).toBe(url);
  });

  it("drops what it cannot read", () => {
    const filters = filtersFromParams(new URLSearchParams("status=NOPE&status=QUEUED&from=yesterday"));
    expect(filters.status).toEqual(["QUEUED"]);
    expect(filters.from).toBeNull();
    expect(filters.order).toBe("NEWEST_FIRST"); // absent: the default, which the URL leaves out
    const none: RunFilters = { status: [], agent: null, from: null, to: null, order: "NEWEST_FIRST", after: null };
    expect(listUrl(none)).toBe("/runs");
    expect(filtersFromParams(new URLSearchParams("order=sideways")).order).toBe("NEWEST_FIRST");
  });
});
