import { useMutation, useQuery } from "@apollo/client/react";
import { useEffect } from "react";
import { AGENT_STATES, AGENT_STATS, type AgentStats, PAUSE_AGENT, RESUME_AGENT } from "../api/documents/agents";
import { AGENTS } from "../api/documents/viewer";
import { describeError } from "../api/errors";
import { Link } from "../app/router";
import { ErrorNote, JsonDetails, Loading, When } from "../ui/common";
import { formatMs } from "../ui/waterfall";
import { Words } from "../ui/Words";

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

/**
 * Pause (every run of the agent in this tenant, and new ones, held at their next step) or Resume
 * (lets go of what the agent's pause held; a run paused on its own stays held). Asks nothing: a
 * pause loses no work and is undone by Resume.
 */
function PauseAgent({ agent, pausedAt }: { agent: string; pausedAt: string | null }) {
  const options = { refetchQueries: ["AgentStates", "Runs"] };
  const [pause, pausing] = useMutation(PAUSE_AGENT, options);
  const [resume, resuming] = useMutation(RESUME_AGENT, options);
  const busy = pausing.loading || resuming.loading ? true : undefined;
  const error = pausing.error ?? resuming.error;
  const act = (paused: boolean) => {
    if (busy) return;
    void (paused ? resume : pause)({ variables: { agent } }).catch(() => undefined);
  };
  return (
    <>
      {pausedAt !== null ? (
        <button type="button" className="primary" aria-disabled={busy} onClick={() => act(true)} aria-label={`Resume agent ${agent}`}>
          Resume
        </button>
      ) : (
        <button type="button" aria-disabled={busy} onClick={() => act(false)} aria-label={`Pause agent ${agent}`}>
          Pause
        </button>
      )}
      {error && (
        <span className="note note-error small" role="alert">
          {describeError(error)}
        </span>
      )}
    </>
  );
}

/** Each agent: what it takes (its input schema), how it has been doing (24 h, 7 d), its pause. */
export function Agents() {
  const agents = useQuery(AGENTS);
  const stats = useQuery(AGENT_STATS);
  const states = useQuery(AGENT_STATES);
  const paused = new Map(
    (states.data?.agentStates ?? []).filter((s) => s.paused).map((s) => [s.agent, s.pausedAt ?? new Date(0).toISOString()]),
  );
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
      {states.error && <ErrorNote error={states.error} what="agent pauses" />}
      {!agents.data && agents.loading && <Loading />}
      {list.map((agent) => (
        <article key={agent.name} className="card" aria-label={`Agent ${agent.name}`} data-agent={agent.name}>
          <div className="section-head">
            <h2 className="small-heading">
              <span className="mono">{agent.name}</span>{" "}
              {paused.has(agent.name) && (
                <span className="badge badge-waiting" data-testid="agent-state">
                  PAUSED
                </span>
              )}
            </h2>
            <div className="toolbar">
              {!states.error && <PauseAgent agent={agent.name} pausedAt={paused.get(agent.name) ?? null} />}
              <Link to={`/runs?agent=${encodeURIComponent(agent.name)}`}>Its runs</Link>
              <Link to={`/runs/new?agent=${encodeURIComponent(agent.name)}`} className="button">
                Start a run
              </Link>
            </div>
          </div>
          {paused.has(agent.name) && (
            <p className="small">
              Paused <When iso={paused.get(agent.name)} />: its runs in this tenant, and new ones, are held at their next
              step until it is resumed. <Link to={`/runs?agent=${encodeURIComponent(agent.name)}&status=WAITING`}>Its held runs</Link>
            </p>
          )}
          {agent.description && (
            <p className="muted">
              <Words text={agent.description} />
            </p>
          )}
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
