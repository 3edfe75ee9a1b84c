import { useQuery } from "@apollo/client/react";
import { useEffect, useMemo, useState } from "react";
import { USAGE } from "../api/documents/usage";
import { RUN_STATUSES, type RunStatus, type UsageDay } from "../api/types";
import { ErrorNote, Loading } from "../ui/common";
import { RunsChart } from "../ui/RunsChart";
import { UsageTokens } from "./UsageTokens";

interface DayRow {
  day: string;
  total: number;
  byStatus: Partial<Record<RunStatus, number>>;
}

/** Per-day totals, newest first, with the split by status. */
export function summarize(usage: readonly UsageDay[]): { days: DayRow[]; agents: [string, number][] } {
  const days = new Map<string, DayRow>();
  const agents = new Map<string, number>();
  for (const u of usage) {
    const row = days.get(u.day) ?? { day: u.day, total: 0, byStatus: {} };
    row.total += u.count;
    row.byStatus[u.status] = (row.byStatus[u.status] ?? 0) + u.count;
    days.set(u.day, row);
    agents.set(u.agent, (agents.get(u.agent) ?? 0) + u.count);
  }
  return {
    days: [...days.values()].sort((a, b) => b.day.localeCompare(a.day)),
    agents: [...agents.entries()].sort((a, b) => b[1] - a[1]),
  };
}

export function Usage() {
  const [days, setDays] = useState(30);
  const { data, error, loading } = useQuery(USAGE, { variables: { days } });
  useEffect(() => {
    document.title = "Usage · Outlive";
  }, []);
  const summary = useMemo(() => summarize(data?.usage ?? []), [data]);
  const peak = Math.max(1, ...summary.days.map((d) => d.total));
  const total = summary.days.reduce((n, d) => n + d.total, 0);

  return (
    <section aria-labelledby="usage-heading">
      <div className="section-head">
        <h1 id="usage-heading">Usage</h1>
        <label className="inline">
          Period
          <select value={days} onChange={(e) => setDays(Number(e.target.value))}>
            <option value={7}>7 days</option>
            <option value={30}>30 days</option>
            <option value={90}>90 days</option>
          </select>
        </label>
      </div>
      {error && <ErrorNote error={error} what="usage figures" />}
      {!data && loading && <Loading />}
      {data && summary.days.length === 0 && <p className="empty">No runs in this period.</p>}
      {data && summary.days.length > 0 && (
        <>
          <p>
            <strong>{total}</strong> runs in the last {days} days
            {summary.agents.length > 0 && (
              <span className="muted"> · {summary.agents.map(([a, n]) => `${a}: ${n}`).join(", ")}</span>
            )}
          </p>
          <RunsChart usage={data.usage} days={days} />
          <div className="table-wrap">
            <table className="table usage" aria-label="Runs per day">
              <thead>
                <tr>
                  <th scope="col">Day (UTC)</th>
                  <th scope="col">Runs</th>
                  {RUN_STATUSES.map((s) => (
                    <th scope="col" key={s} className="col-status">
                      {s.charAt(0) + s.slice(1).toLowerCase()}
                    </th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {summary.days.map((d) => (
                  <tr key={d.day}>
                    <td className="mono">{d.day}</td>
                    <td>
                      <span className="bar" style={{ width: `${(d.total / peak) * 8}em` }} aria-hidden="true" />{" "}
                      {d.total}
                    </td>
                    {RUN_STATUSES.map((s) => (
                      <td key={s} className="col-status">
                        {d.byStatus[s] ?? 0}
                      </td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      )}
      <UsageTokens days={days} />
    </section>
  );
}
