/**
 * Model tokens and cost (`usageTokens`) as the usage page shows them: a row per day and agent,
 * newest day first, a total per agent and one for the period.
 *
 * A cost is what the server's price table priced, with the models it did not price named
 * beside it (`unpricedModels`, round five F12: one unpriced model no longer hides a day's cost);
 * null when nothing was priced. A sum adds what was priced and names every unpriced model, as the
 * server sums it.
 */
import type { UsageTokensDay } from "../api/types";

export interface TokensRow {
  inputTokens: number;
  outputTokens: number;
  costUsd: number | null;
  unpricedModels: readonly string[];
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

const ZERO: TokensRow = { inputTokens: 0, outputTokens: 0, costUsd: null, unpricedModels: [] }; // nothing priced yet

function add(a: TokensRow, b: TokensRow): TokensRow {
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    costUsd: a.costUsd === null && b.costUsd === null ? null : (a.costUsd ?? 0) + (b.costUsd ?? 0),
    unpricedModels: [...new Set([...a.unpricedModels, ...b.unpricedModels])].sort(),
  };
}

/** A row as the server sent it (`unpricedModels` absent from a server before round five). */
function asRow(r: UsageTokensDay): TokensRow {
  const { inputTokens, outputTokens, costUsd } = r;
  return { inputTokens, outputTokens, costUsd, unpricedModels: r.unpricedModels ?? [] };
}

export function summarizeTokens(rows: readonly UsageTokensDay[]): TokensSummary {
  const agents = new Map<string, TokensRow>();
  let total = ZERO;
  for (const row of rows) {
    agents.set(row.agent, add(agents.get(row.agent) ?? ZERO, asRow(row)));
    total = add(total, asRow(row));
  }
  const days = rows
    .map((r) => ({ day: r.day, agent: r.agent, ...asRow(r) }))
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

/**
 * A row's cost: its dollars, and the models it could not price ("$0.025 (demo unpriced)"); with
 * nothing priced, the models that have no price ("no price for demo").
 */
export function formatCost(row: TokensRow, locale?: string): string {
  if (row.costUsd === null && row.unpricedModels.length > 0) return `no price for ${row.unpricedModels.join(", ")}`;
  const priced = formatUsd(row.costUsd, locale);
  if (row.costUsd === null || row.unpricedModels.length === 0) return priced;
  return `${priced} (${row.unpricedModels.join(", ")} unpriced)`;
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
