/**
 * Model tokens and cost (`usageTokens`) as the usage page shows them: a row per day and agent,
 * newest day first, a total per agent and one for the period.
 *
 * A cost is null when a model was not in the server's price table. A sum that takes in an
 * unknown cost is unknown too, as the server sums it: a partial sum would read as a total.
 */
import type { UsageTokensDay } from "../api/types";

export interface TokensRow {
  inputTokens: number;
  outputTokens: number;
  costUsd: number | null;
}

export interface TokensDayRow extends TokensRow {
  day: string;
  agent: string;
}

export interface TokensSummary {
  days: TokensDayRow[];
  agents: (TokensRow & { agent: string })[];
  total: TokensRow;
}

const ZERO: TokensRow = { inputTokens: 0, outputTokens: 0, costUsd: 0 };

function add(a: TokensRow, b: TokensRow): TokensRow {
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    costUsd: a.costUsd === null || b.costUsd === null ? null : a.costUsd + b.costUsd,
  };
}

export function summarizeTokens(rows: readonly UsageTokensDay[]): TokensSummary {
  const agents = new Map<string, TokensRow>();
  let total = ZERO;
  for (const row of rows) {
    agents.set(row.agent, add(agents.get(row.agent) ?? ZERO, row));
    total = add(total, row);
  }
  const days = rows
    .map(({ day, agent, inputTokens, outputTokens, costUsd }) => ({ day, agent, inputTokens, outputTokens, costUsd }))
    .sort((a, b) => b.day.localeCompare(a.day) || a.agent.localeCompare(b.agent));
  return {
    days,
    agents: [...agents.entries()]
      .map(([agent, sums]) => ({ agent, ...sums }))
      .sort((a, b) => b.inputTokens + b.outputTokens - (a.inputTokens + a.outputTokens) || a.agent.localeCompare(b.agent)),
    total,
  };
}

/** Whole tokens, grouped as the reader's locale groups digits. */
export function formatTokens(n: number, locale?: string): string {
  return new Intl.NumberFormat(locale).format(n);
}

/** US dollars: cents at least, up to four decimals below a dollar ("$0.0125"); "unknown" for null. */
export function formatUsd(cost: number | null, locale?: string): string {
  if (cost === null) return "unknown";
  if (cost > 0 && cost < 0.0001) return `< ${formatUsd(0.0001, locale)}`;
  return new Intl.NumberFormat(locale, {
    style: "currency",
    currency: "USD",
    minimumFractionDigits: 2,
    maximumFractionDigits: cost < 1 ? 4 : 2,
  }).format(cost);
}
