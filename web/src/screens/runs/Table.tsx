import type { RunsQuery } from "../../api/generated";
import { Link } from "../../app/router";
import { CopyButton, StatusBadge, When } from "../../ui/common";
import { formatDuration, shortId, timeZone } from "../../ui/format";
import { waitingShort } from "../../ui/waiting";
import { listUrl, type RunFilters } from "../runFilters";
import { costText, type RunCost, useRunCosts } from "./costs";

type Edge = RunsQuery["runs"]["edges"][number];
type ListedRun = Edge["node"];

/** Which rows are ticked (for the bulk actions), and how to tick them. */
export interface Ticks {
  has: (id: string) => boolean;
  toggle: (id: string) => void;
  setAll: (ids: readonly string[], on: boolean) => void;
}

/** The runs of one page, newest (or oldest) first; the Created header flips the order; each row
 * can be ticked, and the header's box ticks every row of the page. */
export function RunsTable({
  edges,
  filters,
  go,
  ticks,
}: {
  edges: readonly Edge[];
  filters: RunFilters;
  go: (change: Partial<RunFilters>) => void;
  ticks: Ticks;
}) {
  const newestFirst = filters.order === "NEWEST_FIRST";
  const ids = edges.map((e) => e.node.id);
  const count = ids.filter(ticks.has).length;
  const all = count > 0 && count === ids.length;
  const costs = useRunCosts(filters);
  return (
    <div className="table-wrap">
      <table className="table runs" aria-label="Runs">
        <thead>
          <tr>
            <th scope="col" className="col-tick">
              <input
                type="checkbox"
                aria-label="Tick every run on this page"
                checked={all}
                ref={(box) => {
                  if (box) box.indeterminate = count > 0 && !all;
                }}
                onChange={() => ticks.setAll(ids, !all)}
              />
            </th>
            <th scope="col">Run</th>
            <th scope="col">Agent</th>
            <th scope="col">Status</th>
            <th scope="col" className="col-optional">Key and tags</th>
            <th scope="col" className="col-optional" title="claims by a worker: resumes and retries alike">
              Claims
            </th>
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
            <th scope="col" className="col-optional" title="model usage recorded by its steps (its children not included)">
              Cost
            </th>
          </tr>
        </thead>
        <tbody>
          {edges.map(({ node: run }) => (
            <RunRow key={run.id} run={run} filters={filters} ticks={ticks} cost={costs.get(run.id)} />
          ))}
        </tbody>
      </table>
    </div>
  );
}

function RunRow({ run, filters, ticks, cost }: { run: ListedRun; filters: RunFilters; ticks: Ticks; cost?: RunCost }) {
  const ticked = ticks.has(run.id);
  return (
    <tr data-run-id={run.id} className={ticked ? "ticked" : undefined}>
      <td className="col-tick">
        <input
          type="checkbox"
          aria-label={`Tick run ${shortId(run.id)}`}
          checked={ticked}
          onChange={() => ticks.toggle(run.id)}
        />
      </td>
      <td data-label="Run">
        <Link to={`/runs/${run.id}`} className="mono" aria-label={`Run ${run.id}`}>
          {shortId(run.id)}
        </Link>{" "}
        <CopyButton value={run.id} label={`Copy run id ${shortId(run.id)}`} />
        {run.retriedFromId && (
          <div className="small muted" data-testid="retry-mark">
            retries{" "}
            <Link to={`/runs/${run.retriedFromId}`} className="mono" aria-label={`Run ${run.retriedFromId} (the run it retries)`}>
              {shortId(run.retriedFromId)}
            </Link>
          </div>
        )}
      </td>
      <td data-label="Agent">{run.agent}</td>
      <td data-label="Status">
        <StatusBadge status={run.status} />
        {run.cancelRequestedAt && run.status === "RUNNING" && <span className="muted small"> cancelling</span>}
        {run.status === "WAITING" && (
          <span className="muted small waiting-short" data-testid="waiting-short">
            {" "}
            {waitingShort(run)}
          </span>
        )}
        {run.status === "RUNNING" && run.pausedAt && <span className="muted small"> pausing</span>}
      </td>
      <td className="col-optional" data-label="Key and tags">
        <KeyAndTags run={run} filters={filters} />
      </td>
      <td className="col-optional" data-label="Claims">
        {run.attempt}
      </td>
      <td data-label="Created">
        <When iso={run.createdAt} />
      </td>
      <td className="col-optional" data-label="Duration">
        {formatDuration(run.startedAt, run.finishedAt)}
      </td>
      <td className="col-optional" data-label="Cost" data-testid="run-cost">
        {costText(cost)}
      </td>
    </tr>
  );
}

/** A run's key and tags, each a link to the list filtered by it. */
export function KeyAndTags({ run, filters }: { run: Pick<ListedRun, "key" | "tags">; filters: RunFilters }) {
  if (!run.key && run.tags.length === 0) return <span className="muted small">—</span>;
  const filtered = (change: Partial<RunFilters>) => listUrl({ ...filters, after: null, ...change });
  return (
    <span className="key-tags">
      {run.key && (
        <Link to={filtered({ key: run.key })} className="mono small" title="Runs of this key">
          {run.key}
        </Link>
      )}
      {run.tags.map((t) => (
        <Link key={t} to={filtered({ tags: [...new Set([...filters.tags, t])] })} className="tag" title="Runs with this tag">
          {t}
        </Link>
      ))}
    </span>
  );
}

/** Back to the first page, and on to the next (by cursor). */
export function Pager({
  filters,
  endCursor,
  hasNextPage,
}: {
  filters: RunFilters;
  endCursor: string | null;
  hasNextPage: boolean;
}) {
  const newestFirst = filters.order === "NEWEST_FIRST";
  return (
    <nav className="pager" aria-label="Pages">
      {filters.after && (
        <Link to={listUrl({ ...filters, after: null })}>{newestFirst ? "← Newest runs" : "← Oldest runs"}</Link>
      )}
      {hasNextPage && endCursor && (
        <Link to={listUrl({ ...filters, after: endCursor })}>{newestFirst ? "Older runs →" : "Newer runs →"}</Link>
      )}
    </nav>
  );
}
