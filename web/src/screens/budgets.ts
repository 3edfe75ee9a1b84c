/**
 * The Budgets screen's words and arithmetic, pure so they are tested without a browser: a
 * budget's title, its bar against a limit (spent, then reserved, and the warnAt mark), and the
 * form read into a `BudgetInput` (or the first field that is wrong, and why).
 */

import type { Budget, BudgetBreach, BudgetInput, BudgetPeriod, BudgetScope } from "../api/documents/budgets";

export const SCOPES: readonly { value: BudgetScope; label: string }[] = [
  { value: "TENANT", label: "The whole tenant" },
  { value: "AGENT", label: "One agent" },
  { value: "TAG", label: "Runs with a tag" },
  { value: "RUN", label: "Each run on its own" },
];

export const PERIODS: readonly { value: BudgetPeriod; label: string }[] = [
  { value: "DAY", label: "Per UTC day" },
  { value: "MONTH", label: "Per UTC month" },
  { value: "RUN", label: "Per run" },
];

export const BREACHES: readonly { value: BudgetBreach; label: string }[] = [
  { value: "PAUSE", label: "Hold the run until there is room (it waits, nothing is lost)" },
  { value: "CANCEL", label: "Cancel the run" },
  { value: "WARN", label: "Only warn (the run goes on)" },
];

/** "Tenant, per day" / "Agent demo, per month" / "Tag user:1, per day" / "Each run". */
export function budgetTitle(b: { scope: BudgetScope; target?: string | null; period: BudgetPeriod }): string {
  const period = b.period === "DAY" ? "per day" : b.period === "MONTH" ? "per month" : "per run";
  switch (b.scope) {
    case "TENANT":
      return `Tenant, ${period}`;
    case "AGENT":
      return `Agent ${b.target ?? "?"}, ${period}`;
    case "TAG":
      return `Tag ${b.target ?? "?"}, ${period}`;
    case "RUN":
      return "Each run";
    default:
      return `${String(b.scope)} ${b.target ?? ""}, ${period}`;
  }
}

export interface Bar {
  /** Spent, as a share of the limit (0..1, capped). */
  spent: number;
  /** Reserved by steps in flight, after the spent part (capped so the two fit in 1). */
  reserved: number;
  /** Spent plus reserved reached the limit. */
  full: boolean;
  /** Spent reached warnAt. */
  warned: boolean;
}

const clamp = (x: number) => (Number.isFinite(x) ? Math.min(Math.max(x, 0), 1) : 0);

/** The bar of one limit: what was spent and reserved, as shares of it. */
export function barOf(spent: number, reserved: number, limit: number, warnAt: number): Bar {
  if (limit <= 0) return { spent: 1, reserved: 0, full: true, warned: true };
  const s = clamp(spent / limit);
  const r = Math.min(clamp(reserved / limit), 1 - s);
  return { spent: s, reserved: r, full: spent + reserved >= limit, warned: spent / limit >= warnAt };
}

/** The form as typed: strings, as the inputs hold them. */
export interface BudgetForm {
  scope: BudgetScope;
  target: string;
  period: BudgetPeriod;
  limitTokens: string;
  limitUsd: string;
  warnAtPercent: string;
  onBreach: BudgetBreach;
}

export const EMPTY_FORM: BudgetForm = {
  scope: "TENANT",
  target: "",
  period: "DAY",
  limitTokens: "",
  limitUsd: "",
  warnAtPercent: "80",
  onBreach: "PAUSE",
};

/** A budget as the form shows it (to edit it: its scope, target and period stay). */
export function formOf(b: Budget): BudgetForm {
  return {
    scope: b.scope,
    target: b.target ?? "",
    period: b.period,
    limitTokens: b.limitTokens === null ? "" : String(b.limitTokens),
    limitUsd: b.limitUsd === null ? "" : String(b.limitUsd),
    warnAtPercent: String(Math.round(b.warnAt * 100)),
    onBreach: b.onBreach,
  };
}

/** The periods a scope may have: RUN with RUN only, the calendar ones with the others. */
export function periodsFor(scope: BudgetScope): BudgetPeriod[] {
  return scope === "RUN" ? ["RUN"] : ["DAY", "MONTH"];
}

export type FormField = "target" | "limitTokens" | "limitUsd" | "warnAtPercent";
export type FormResult = { ok: true; input: BudgetInput } | { ok: false; field: FormField; error: string };

/** The form read into setBudget's input, or the first field that is wrong and why. */
export function readBudgetForm(form: BudgetForm): FormResult {
  const target = form.target.trim();
  const needsTarget = form.scope === "AGENT" || form.scope === "TAG";
  if (needsTarget && !target) {
    return { ok: false, field: "target", error: form.scope === "AGENT" ? "Name the agent." : "Name the tag, such as user:123." };
  }
  const tokensText = form.limitTokens.trim();
  const usdText = form.limitUsd.trim();
  const tokens = tokensText === "" ? null : Number(tokensText);
  if (tokens !== null && !(Number.isInteger(tokens) && tokens > 0)) {
    return { ok: false, field: "limitTokens", error: "A token limit is a whole number above 0." };
  }
  const usd = usdText === "" ? null : Number(usdText);
  if (usd !== null && !(Number.isFinite(usd) && usd > 0)) {
    return { ok: false, field: "limitUsd", error: "A USD limit is a number above 0." };
  }
  if (tokens === null && usd === null) {
    return { ok: false, field: "limitTokens", error: "Give a token limit, a USD limit, or both." };
  }
  const warn = Number(form.warnAtPercent.trim() || "80");
  if (!(Number.isFinite(warn) && warn >= 0 && warn <= 100)) {
    return { ok: false, field: "warnAtPercent", error: "Warn at is a percentage from 0 to 100." };
  }
  const periods = periodsFor(form.scope);
  return {
    ok: true,
    input: {
      scope: form.scope,
      target: needsTarget ? target : null,
      period: periods.includes(form.period) ? form.period : periods[0]!,
      limitTokens: tokens,
      limitUsd: usd,
      warnAt: warn / 100,
      onBreach: form.onBreach,
    },
  };
}
