import { useQuery } from "@apollo/client/react";
import { useEffect } from "react";
import { AGENT_STATS, type AgentStats } from "../api/documents/agents";
import { AGENTS } from "../api/documents/viewer";
import { Link } from "../app/router";
import { ErrorNote, JsonDetails, Loading } from "../ui/common";
import { formatMs } from "../ui/waterfall";

/** Succeeded out of the runs that ended (running ones do not count yet); null with none. */
export function successRate(s: AgentStats | undefined): number | null {
  if (!s) return null;
  const ended = s.succeeded + s.failed + s.cancelled;
  return ended ? s.succeeded / ended : null;
}

function Window({ label, stats }: { label: string; stats: AgentStats | undefined }) {
  const rate = successRate(stats);
  return (
    <div className="stat-window">
      <h3 className="small-heading">{label}</h3>
      <dl className="stats">
        <div>
          <dt>Runs</dt>
          <dd data-testid="stat-runs">{stats?.runs ?? 0}</dd>
        </div>
        <div>
          <dt>Success rate</dt>
          <dd data-testid="stat-success">{rate === null ? "—" : `${Math.round(rate * 100)}%`}</dd>
        </div>
        <div>
          <dt>p50 duration</dt>
          <dd data-testid="stat-p50">{stats?.p50DurationMs == null ? "—" : formatMs(stats.p50DurationMs)}</dd>
        </div>
        <div>
          <dt>Failed</dt>
          <dd>{stats?.failed ?? 0}</dd>
        </div>
      </dl>
    </div>
  );
}

/** Each agent: what it takes (its input schema) and how it has been doing (24 h, 7 d). */
export function Agents() {
  const agents = useQuery(AGENTS);
  const stats = useQuery(AGENT_STATS);
  useEffect(() => {
    document.title = "Agents · Outlive";
  }, []);
  const list = agents.data?.agents ?? [];
  const day = new Map((stats.data?.day ?? []).map((s) => [s.agent, s]));
  const week = new Map((stats.data?.week ?? []).map((s) => [s.agent, s]));
  return (
    <section aria-labelledby="agents-heading">
      <h1 id="agents-heading">Agents</h1>
      <p className="muted">
        Success rate: succeeded out of the runs that ended. p50: the median time from start to finish of the
        succeeded runs.
      </p>
      {agents.error && <ErrorNote error={agents.error} />}
      {stats.error && <ErrorNote error={stats.error} what="agent statistics" />}
      {!agents.data && agents.loading && <Loading />}
      {list.map((agent) => (
        <article key={agent.name} className="card" aria-label={`Agent ${agent.name}`} data-agent={agent.name}>
          <div className="section-head">
            <h2 className="small-heading mono">{agent.name}</h2>
            <div className="toolbar">
              <Link to={`/runs?agent=${encodeURIComponent(agent.name)}`}>Its runs</Link>
              <Link to={`/runs/new?agent=${encodeURIComponent(agent.name)}`} className="button">
                Start a run
              </Link>
            </div>
          </div>
          {agent.description && <p className="muted">{agent.description}</p>}
          <div className="columns">
            <Window label="Last 24 hours" stats={day.get(agent.name)} />
            <Window label="Last 7 days" stats={week.get(agent.name)} />
          </div>
          <h3 className="small-heading">Input schema</h3>
          <JsonDetails value={agent.inputSchema} label={`${agent.name} input schema`} />
        </article>
      ))}
    </section>
  );
}
