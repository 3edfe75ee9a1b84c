import { useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import { RUNS, RUNS_PAGE_SIZE } from "../api/documents/runs";
import { AGENTS } from "../api/documents/viewer";
import { RUN_STATUSES } from "../api/types";
import { Link, navigate, useLocation } from "../app/router";
import { filtersFromParams, isoOrNull, listUrl, type RunFilters, toLocalInput } from "./runFilters";
import { CopyButton, ErrorNote, Loading, StatusBadge, When } from "../ui/common";
import { formatDuration, shortId, timeZone } from "../ui/format";
import { useNarrow } from "../ui/narrow";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The start of a run id, as the console shows it: 4 to 32 hex digits (dashes ignored). */
export function isIdPrefix(value: string): boolean {
  const digits = value.trim().replace(/-/g, "");
  return /^[0-9a-f]{4,32}$/i.test(digits);
}

function emptyText(filters: RunFilters): string {
  if (!filters.status.length && !filters.agent && !filters.from && !filters.to) return "No runs yet.";
  const which = filters.status.map((s) => s.toLowerCase()).join(" or ");
  const when = filters.from || filters.to ? " in that time range" : "";
  return `No ${which ? `${which} ` : ""}runs${filters.agent ? ` of ${filters.agent}` : ""}${when}.`;
}

/** Newest (or oldest) first, filtered by status (several), agent and time range, paged by cursor;
 * the URL holds it all. */
export function RunsList() {
  const { params } = useLocation();
  const narrow = useNarrow();
  const filters = filtersFromParams(params);
  const { status, agent, after, from, to, order } = filters;
  const newestFirst = order === "NEWEST_FIRST";
  const { data, error, loading } = useQuery(RUNS, {
    variables: {
      first: RUNS_PAGE_SIZE,
      after,
      status: status.length ? status : null,
      agent,
      createdSince: from,
      createdBefore: to,
      order,
    },
  });
  const agents = useQuery(AGENTS).data?.agents ?? [];
  const [search, setSearch] = useState("");
  const [searchError, setSearchError] = useState<string | null>(null);
  useEffect(() => {
    document.title = "Runs · Outlive";
  }, []);
  const go = (change: Partial<RunFilters>) => navigate(listUrl({ ...filters, after: null, ...change }));
  const onSearch = (event: FormEvent) => {
    event.preventDefault();
    const id = search.trim();
    if (UUID.test(id) || isIdPrefix(id)) {
      setSearchError(null);
      navigate(`/runs/${id.toLowerCase()}`); // a short id is looked up there (runsByIdPrefix)
    } else {
      setSearchError("Paste a run id, or its first 4 or more characters (such as 0b6c1f4e).");
    }
  };
  const edges = data?.runs.edges ?? [];
  const filtered = status.length > 0 || Boolean(agent || from || to);

  return (
    <section aria-labelledby="runs-heading">
      <div className="section-head">
        <h1 id="runs-heading">Runs</h1>
        <div className="toolbar">
          <Link to={`/replays${agent ? `?agent=${encodeURIComponent(agent)}` : ""}`} className="button">
            Replay failed runs…
          </Link>
          <Link to="/runs/new" className="button primary">
            Start a run
          </Link>
        </div>
      </div>
      <form className="filters" role="search" aria-label="Find a run" onSubmit={onSearch}>
        <div className="field">
          <label htmlFor="run-search">Run id</label>
          <input
            id="run-search"
            type="search"
            placeholder="Run id or short id"
            value={search}
            aria-invalid={searchError ? true : undefined}
            aria-describedby={searchError ? "run-search-error" : undefined}
            aria-keyshortcuts="/"
            onChange={(e) => setSearch(e.target.value)}
          />
          {searchError && (
            <p className="field-error" id="run-search-error">
              {searchError}
            </p>
          )}
        </div>
        <button type="submit">Open</button>
      </form>
      <details className="filters-fold" open={!narrow || filtered}>
      <summary>
        Filters{filtered ? " (on)" : ""}
      </summary>
      <div className="filters">
        <fieldset className="checks status-filter">
          <legend>Status</legend>
          {RUN_STATUSES.map((s) => (
            <label key={s} className="check">
              <input
                type="checkbox"
                name="status"
                value={s}
                checked={status.includes(s)}
                onChange={(e) =>
                  go({ status: e.target.checked ? [...status, s] : status.filter((x) => x !== s) })
                }
              />
              <StatusBadge status={s} />
            </label>
          ))}
        </fieldset>
        <div className="field">
          <label htmlFor="runs-agent">Agent</label>
          <select id="runs-agent" value={agent ?? ""} onChange={(e) => go({ agent: e.target.value || null })}>
            <option value="">Any agent</option>
            {agents.map((a) => (
              <option key={a.name} value={a.name}>
                {a.name}
              </option>
            ))}
            {agent && !agents.some((a) => a.name === agent) && <option value={agent}>{agent}</option>}
          </select>
        </div>
        <div className="field">
          <label htmlFor="runs-from">Created from</label>
          <input
            id="runs-from"
            type="datetime-local"
            value={toLocalInput(from)}
            onChange={(e) => go({ from: isoOrNull(e.target.value) })}
          />
        </div>
        <div className="field">
          <label htmlFor="runs-to">Created before</label>
          <input
            id="runs-to"
            type="datetime-local"
            value={toLocalInput(to)}
            onChange={(e) => go({ to: isoOrNull(e.target.value) })}
          />
        </div>
        {(status.length > 0 || agent || from || to) && (
          <button type="button" className="quiet" onClick={() => navigate("/runs")}>
            Clear filters
          </button>
        )}
      </div>
      </details>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && edges.length === 0 && (
        <p className="empty">
          {emptyText(filters)}{" "}
          <Link to="/runs/new">Start one</Link>.
        </p>
      )}
      {edges.length > 0 && (
        <div className="table-wrap">
        <table className="table runs" aria-label="Runs">
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Agent</th>
              <th scope="col">Status</th>
              <th scope="col" className="col-optional" title="claims by a worker: resumes and retries alike">Claims</th>
              <th scope="col" aria-sort={newestFirst ? "descending" : "ascending"}>
                <button
                  type="button"
                  className="quiet sort"
                  aria-label={`Created, ${newestFirst ? "newest" : "oldest"} first: show ${newestFirst ? "oldest" : "newest"} first`}
                  onClick={() => go({ order: newestFirst ? "OLDEST_FIRST" : "NEWEST_FIRST" })}
                >
                  Created {newestFirst ? "↓" : "↑"}
                </button>{" "}
                <span className="muted small">({timeZone()})</span>
              </th>
              <th scope="col" className="col-optional">Duration</th>
            </tr>
          </thead>
          <tbody>
            {edges.map(({ node: run }) => (
              <tr key={run.id} data-run-id={run.id}>
                <td data-label="Run">
                  <Link to={`/runs/${run.id}`} className="mono" aria-label={`Run ${run.id}`}>
                    {shortId(run.id)}
                  </Link>{" "}
                  <CopyButton value={run.id} label={`Copy run id ${shortId(run.id)}`} />
                </td>
                <td data-label="Agent">{run.agent}</td>
                <td data-label="Status">
                  <StatusBadge status={run.status} />
                  {run.cancelRequestedAt && run.status === "RUNNING" && (
                    <span className="muted small"> cancelling</span>
                  )}
                </td>
                <td className="col-optional" data-label="Claims">{run.attempt}</td>
                <td data-label="Created">
                  <When iso={run.createdAt} />
                </td>
                <td className="col-optional" data-label="Duration">{formatDuration(run.startedAt, run.finishedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        </div>
      )}
      <nav className="pager" aria-label="Pages">
        {after && (
          <Link to={listUrl({ ...filters, after: null })}>{newestFirst ? "← Newest runs" : "← Oldest runs"}</Link>
        )}
        {data?.runs.pageInfo.hasNextPage && data.runs.pageInfo.endCursor && (
          <Link to={listUrl({ ...filters, after: data.runs.pageInfo.endCursor })}>
            {newestFirst ? "Older runs →" : "Newer runs →"}
          </Link>
        )}
      </nav>
    </section>
  );
}
