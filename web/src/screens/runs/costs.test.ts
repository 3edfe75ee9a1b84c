import { describe, expect, it } from "vitest";
import { costText } from "./costs";

describe("a run's cost in the runs list", () => {
  it("says the price, the tokens of a model with no price, nothing for no usage", () => {
    expect(costText(undefined)).toBe("…");
    expect(costText({ inputTokens: 0, outputTokens: 0, costUsd: null, unpricedModels: [] })).toBe("—");
    expect(costText({ inputTokens: 100, outputTokens: 20, costUsd: 0.01234, unpricedModels: [] })).toBe("0.0123 USD");
    expect(costText({ inputTokens: 1000, outputTokens: 200, costUsd: null, unpricedModels: ["demo"] })).toBe(
      "1,200 tokens, no price for demo",
    );
    expect(costText({ inputTokens: 10, outputTokens: 5, costUsd: 0.5, unpricedModels: ["demo"] })).toBe(
      "0.5000 USD, no price for demo",
    );
  });
});
