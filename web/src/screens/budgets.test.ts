import { describe, expect, it } from "vitest";
import { barOf, budgetTitle, EMPTY_FORM, readBudgetForm } from "./budgets";

describe("budgets", () => {
  it("titles a budget by scope, target and period", () => {
    expect(budgetTitle({ scope: "TENANT", target: null, period: "DAY" })).toBe("Tenant, per day");
    expect(budgetTitle({ scope: "AGENT", target: "demo", period: "MONTH" })).toBe("Agent demo, per month");
    expect(budgetTitle({ scope: "TAG", target: "user:1", period: "DAY" })).toBe("Tag user:1, per day");
    expect(budgetTitle({ scope: "RUN", target: null, period: "RUN" })).toBe("Each run");
  });

  it("draws spent then reserved, capped at the limit", () => {
    expect(barOf(50, 20, 100, 0.8)).toEqual({ spent: 0.5, reserved: 0.2, full: false, warned: false });
    const over = barOf(90, 30, 100, 0.8);
    expect(over).toMatchObject({ spent: 0.9, full: true, warned: true });
    expect(over.reserved).toBeCloseTo(0.1);
    expect(barOf(150, 0, 100, 0.8).spent).toBe(1);
  });

  it("reads the form, refusing what setBudget would", () => {
    expect(readBudgetForm({ ...EMPTY_FORM })).toMatchObject({ ok: false, field: "limitTokens" });
    expect(readBudgetForm({ ...EMPTY_FORM, scope: "AGENT", limitTokens: "10" })).toMatchObject({ ok: false, field: "target" });
    expect(readBudgetForm({ ...EMPTY_FORM, limitTokens: "1.5" })).toMatchObject({ ok: false, field: "limitTokens" });
    expect(readBudgetForm({ ...EMPTY_FORM, limitUsd: "-1" })).toMatchObject({ ok: false, field: "limitUsd" });
    expect(readBudgetForm({ ...EMPTY_FORM, limitTokens: "10", warnAtPercent: "120" })).toMatchObject({ ok: false, field: "warnAtPercent" });
    expect(readBudgetForm({ ...EMPTY_FORM, scope: "RUN", period: "DAY", limitUsd: "2.5", warnAtPercent: "50" })).toEqual({
      ok: true,
      input: { scope: "RUN", target: null, period: "RUN", limitTokens: null, limitUsd: 2.5, warnAt: 0.5, onBreach: "PAUSE" },
    });
  });
});
