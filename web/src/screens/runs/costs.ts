import { useQuery } from "@apollo/client/react";
import { RUNS_COST } from "../../api/documents/runs";
import { type RunFilters, runsVariables } from "../runFilters";

export interface RunCost {
  inputTokens: number;
  outputTokens: number;
  costUsd?: number | null;
  unpricedModels: readonly string[];
}

/**
 * What each run of the page cost, by id: asked apart from the page (RunsCost, the same
 * variables), so the list is drawn first and its costs follow; refreshed by the same nudges.
 */
export function useRunCosts(filters: RunFilters): ReadonlyMap<string, RunCost> {
  const { data } = useQuery(RUNS_COST, { variables: runsVariables(filters) });
  return new Map((data?.runs.edges ?? []).map((e) => [e.node.id, e.node.usage]));
}

/** "0.0123 USD", "1,200 tokens, no price for demo", "—" (no model usage). */
export function costText(cost: RunCost | undefined): string {
  if (!cost) return "…";
  const tokens = cost.inputTokens + cost.outputTokens;
  if (tokens === 0 && !cost.costUsd) return "—";
  const priced = cost.costUsd != null ? `${cost.costUsd.toFixed(4)} USD` : null;
  const unpriced = cost.unpricedModels.length > 0 ? `no price for ${cost.unpricedModels.join(", ")}` : null;
  if (priced && !unpriced) return priced;
  return [priced ?? `${tokens.toLocaleString("en")} tokens`, unpriced].filter(Boolean).join(", ");
}
