import { useQuery } from "@apollo/client/react";
import { useMemo } from "react";
import { USAGE_TOKENS } from "../api/documents/usage";
import { ErrorNote, Loading } from "../ui/common";
import { formatCost, formatTokens, type TokensRow, summarizeTokens } from "./usageTokens";

const UNKNOWN_COST = "No model these steps called is in the price table (genai-prices and OUTLIVE_MODEL_PRICES)";
const PARTIAL_COST = "Priced models only: the models named are not in the price table (genai-prices and OUTLIVE_MODEL_PRICES)";

function Figures({ row }: { row: TokensRow }) {
  return (
    <>
      <td className="num" data-testid="input-tokens">
        {formatTokens(row.inputTokens)}
      </td>
      <td className="num" data-testid="output-tokens">
        {formatTokens(row.outputTokens)}
      </td>
      <td className="num" data-testid="cost" title={costNote(row)}>
        {formatCost(row)}
      </td>
    </>
  );
}

function Models({ names }: { names: readonly string[] }) {
  return (
    <>
      {names.map((name, i) => (
        <span key={name}>
          {i > 0 && ", "}
          <code>{name}</code>
        </span>
      ))}
    </>
  );
}

function costNote(row: TokensRow): string | undefined {
  if (row.costUsd === null) return UNKNOWN_COST;
  return row.unpricedModels.length ? PARTIAL_COST : undefined;
}

function Head({ first }: { first: string[] }) {
  return (
    <thead>
      <tr>
        {first.map((label) => (
          <th scope="col" key={label}>
            {label}
          </th>
        ))}
        <th scope="col" className="num">Input tokens</th>
        <th scope="col" className="num">Output tokens</th>
        <th scope="col" className="num">Cost (USD)</th>
      </tr>
    </thead>
  );
}

/**
 * Model tokens and cost per agent and UTC day over the period (`usageTokens`), as the runs'
 * steps recorded them, with a total per agent and for the period.
 */
export function UsageTokens({ days }: { days: number }) {
  const { data, error, loading } = useQuery(USAGE_TOKENS, { variables: { days } });
  const summary = useMemo(() => summarizeTokens(data?.usageTokens ?? []), [data]);
  return (
    <section className="usage-tokens" aria-labelledby="tokens-heading">
      <h2 id="tokens-heading">Tokens and cost</h2>
      {error && <ErrorNote error={error} what="token and cost figures" />}
      {!data && loading && <Loading />}
      {data && summary.days.length === 0 && (
        <p className="muted">No model usage recorded in the last {days} days.</p>
      )}
      {data && summary.days.length > 0 && (
        <>
          <div className="table-wrap">
            <table className="table usage" aria-label="Tokens and cost per agent">
              <Head first={["Agent"]} />
              <tbody>
                {summary.agents.map((a) => (
                  <tr key={a.agent} data-agent={a.agent}>
                    <th scope="row" className="mono">{a.agent}</th>
                    <Figures row={a} />
                  </tr>
                ))}
              </tbody>
              <tfoot>
                <tr data-testid="tokens-total">
                  <th scope="row">Total</th>
                  <Figures row={summary.total} />
                </tr>
              </tfoot>
            </table>
          </div>
          <div className="table-wrap">
            <table className="table usage" aria-label="Tokens and cost per day and agent">
              <Head first={["Day (UTC)", "Agent"]} />
              <tbody>
                {summary.days.map((d) => (
                  <tr key={`${d.day} ${d.agent}`} data-day={d.day} data-agent={d.agent}>
                    <td className="mono">{d.day}</td>
                    <td className="mono">{d.agent}</td>
                    <Figures row={d} />
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <p className="muted small" data-testid="prices-note">
            Counted when each step completed, from the usage it recorded; a cost adds what the price
            table prices and names the models it does not.
            {summary.total.unpricedModels.length > 0 && (
              <>
                {" "}
                No price for <Models names={summary.total.unpricedModels} />: prices come from genai-prices and{" "}
                <code>OUTLIVE_MODEL_PRICES</code> (see Budgets in the docs).
              </>
            )}
          </p>
        </>
      )}
    </section>
  );
}
