import { describe, expect, it } from "vitest";
import { formatCost, formatTokens, formatUsd, summarizeTokens } from "./usageTokens";

const row = (
  day: string,
  agent: string,
  inputTokens: number,
  outputTokens: number,
  costUsd: number | null,
  unpricedModels: string[] = [],
) => ({ day, agent, inputTokens, outputTokens, costUsd, unpricedModels });

describe("tokens and cost per agent and day", () => {
  it("rows newest day first, a total per agent and for the period", () => {
    const summary = summarizeTokens([
      row("2026-01-01", "llm", 100, 10, 0.5),
      row("2026-01-02", "demo", 7, 3, 0.25),
      row("2026-01-02", "llm", 200, 20, 1),
    ]);
    expect(summary.days.map((d) => `${d.day} ${d.agent}`)).toEqual([
      "2026-01-02 demo",
      "2026-01-02 llm",
      "2026-01-01 llm",
    ]);
    expect(summary.agents).toEqual([
      { agent: "llm", inputTokens: 300, outputTokens: 30, costUsd: 1.5, unpricedModels: [] },
      { agent: "demo", inputTokens: 7, outputTokens: 3, costUsd: 0.25, unpricedModels: [] },
    ]);
    expect(summary.total).toEqual({ inputTokens: 307, outputTokens: 33, costUsd: 1.75, unpricedModels: [] });
  });

  it("an unpriced model leaves the priced part summed and is named (round five, F12)", () => {
    const summary = summarizeTokens([
      row("2026-01-01", "llm", 1, 1, null, ["tiny"]),
      row("2026-01-01", "demo", 1, 1, 0.1, ["demo"]),
    ]);
    const llm = summary.agents.find((a) => a.agent === "llm");
    expect(llm?.costUsd).toBeNull();
    expect(formatCost(llm!, "en-US")).toBe("no price for tiny"); // the model named, not "unknown"
    expect(summary.total.costUsd).toBe(0.1);
    expect(summary.total.unpricedModels).toEqual(["demo", "tiny"]);
    expect(formatCost(summary.total, "en-US")).toBe("$0.10 (demo, tiny unpriced)");
  });

  it("nothing recorded: no rows and zero totals", () => {
    expect(summarizeTokens([])).toEqual({
      days: [],
      agents: [],
      total: { inputTokens: 0, outputTokens: 0, costUsd: null, unpricedModels: [] },
    });
  });

  it("formats tokens and dollars", () => {
    expect(formatTokens(1234567, "en-US")).toBe("1,234,567");
    expect(formatUsd(0.0125, "en-US")).toBe("$0.0125");
    expect(formatUsd(12.5, "en-US")).toBe("$12.50");
    expect(formatUsd(0, "en-US")).toBe("$0.00");
    expect(formatUsd(0.00001, "en-US")).toBe("< $0.0001");
    expect(formatUsd(null, "en-US")).toBe("unknown");
  });
});
