import { useQuery } from "@apollo/client/react";
import { useEffect } from "react";
import { RUNS, RUNS_PAGE_SIZE } from "../api/documents/runs";
import { RUN_STATUSES, type RunStatus } from "../api/types";
import { Link, navigate, useLocation } from "../app/router";
import { ErrorNote, Loading, StatusBadge } from "../ui/common";
import { formatDuration, formatTime, shortId } from "../ui/format";

function listUrl(status: string | null, after: string | null): string {
  const params = new URLSearchParams();
  if (status) params.set("status", status);
  if (after) params.set("after", after);
  const query = params.toString();
  return query ? `/runs?${query}` : "/runs";
}

/** Newest first, filtered by status, live: nudges and reconnects re-query it. */
export function RunsList() {
  const { params } = useLocation();
  const status = params.get("status");
  const after = params.get("after");
  const validStatus = RUN_STATUSES.includes(status as RunStatus) ? (status as RunStatus) : null;
  const { data, error, loading } = useQuery(RUNS, {
    variables: {
      first: RUNS_PAGE_SIZE,
      after: after || null,
      status: validStatus ? [validStatus] : null,
    },
  });
  useEffect(() => {
    document.title = "Runs · Outlive";
  }, []);
  const edges = data?.runs.edges ?? [];

  return (
    <section aria-labelledby="runs-heading">
      <div className="section-head">
        <h1 id="runs-heading">Runs</h1>
        <div className="toolbar">
          <label className="inline">
            Status
            <select
              name="status"
              value={validStatus ?? ""}
              onChange={(e) => navigate(listUrl(e.target.value || null, null))}
            >
              <option value="">All</option>
              {RUN_STATUSES.map((s) => (
                <option key={s} value={s}>
                  {s.charAt(0) + s.slice(1).toLowerCase()}
                </option>
              ))}
            </select>
          </label>
          <Link to="/runs/new" className="button primary">
            Start a run
          </Link>
        </div>
      </div>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && edges.length === 0 && (
        <p className="empty">
          {validStatus ? `No ${validStatus.toLowerCase()} runs.` : "No runs yet."}{" "}
          <Link to="/runs/new">Start one</Link>.
        </p>
      )}
      {edges.length > 0 && (
        <table className="table runs" aria-label="Runs">
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Agent</th>
              <th scope="col">Status</th>
              <th scope="col">Attempt</th>
              <th scope="col">Created</th>
              <th scope="col">Duration</th>
            </tr>
          </thead>
          <tbody>
            {edges.map(({ node: run }) => (
              <tr key={run.id} data-run-id={run.id}>
                <td>
                  <Link to={`/runs/${run.id}`} className="mono" aria-label={`Run ${run.id}`}>
                    {shortId(run.id)}
                  </Link>
                </td>
                <td>{run.agent}</td>
                <td>
                  <StatusBadge status={run.status} />
                  {run.cancelRequestedAt && run.status === "RUNNING" && (
                    <span className="muted small"> cancelling</span>
                  )}
                </td>
                <td>{run.attempt}</td>
                <td title={run.createdAt}>{formatTime(run.createdAt)}</td>
                <td>{formatDuration(run.startedAt, run.finishedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <nav className="pager" aria-label="Pages">
        {after && <Link to={listUrl(validStatus, null)}>← Newest runs</Link>}
        {data?.runs.pageInfo.hasNextPage && data.runs.pageInfo.endCursor && (
          <Link to={listUrl(validStatus, data.runs.pageInfo.endCursor)}>Older runs →</Link>
        )}
      </nav>
    </section>
  );
}
